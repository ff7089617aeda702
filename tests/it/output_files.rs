//! Writing an output file (openspec/specs/cli/spec.md, "Writing an output file"), for every
//! command that writes one: a link is written through and stays a link, a link to nothing is
//! refused with one line, a FIFO and a device are written in place and stay what they were,
//! and a failed write is one `diag:` line and exit 2 with the stored runs unchanged.

#![cfg(unix)]

use std::ffi::CString;
use std::fs;
use std::os::unix::fs::{symlink, FileTypeExt};
use std::path::{Path, PathBuf};

use crate::support::cli_env::{Out, TestEnv};

const FIXTURE: &str = "fixtures/runs/pass.json";

/// An environment with one stored run; returns it and the run's id.
fn env_with_run() -> (TestEnv, String) {
    let env = TestEnv::new();
    let file = env.copy_fixture(FIXTURE, "pass.json");
    let doc = env.ask_fixture_json(&file, &[]);
    let run_id = doc["run_id"].as_str().expect("a run id").to_string();
    (env, run_id)
}

/// Every command that writes a file, as the arguments that write `target` (named `.html`, so
/// `ask --report` takes its format from it).
fn writers(env: &TestEnv, run_id: &str, target: &Path) -> Vec<(&'static str, Vec<String>)> {
    let t = target.display().to_string();
    let fixture = env.path("pass.json").display().to_string();
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    vec![
        (
            "report -o",
            s(&["report", run_id, "--format", "html", "-o", &t]),
        ),
        ("export -o", s(&["export", run_id, "-o", &t])),
        (
            "ask --record",
            s(&["ask", "--fixture", &fixture, "--record", &t]),
        ),
        (
            "ask --report",
            s(&["ask", "--fixture", &fixture, "--report", &t]),
        ),
        ("replay --junit", s(&["replay", &fixture, "--junit", &t])),
        (
            "replay --report-dir",
            s(&[
                "replay",
                &named_like(env, target),
                "--report-dir",
                &target
                    .parent()
                    .unwrap_or(Path::new("."))
                    .display()
                    .to_string(),
            ]),
        ),
    ]
}

/// A copy of the run file named so that `replay --report-dir` names its report as `target`
/// (`NAME.json` gives `NAME.html`), in a folder of its own.
fn named_like(env: &TestEnv, target: &Path) -> String {
    let stem = target.file_stem().unwrap().to_string_lossy();
    let dir = env.path(&format!("replay-{stem}"));
    fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(format!("{stem}.json"));
    fs::copy(env.path("pass.json"), &copy).unwrap();
    copy.display().to_string()
}

fn run(env: &TestEnv, args: &[String]) -> Out {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    env.run(&args)
}

/// The stored runs as `diag runs --json` lists them.
fn stored_runs(env: &TestEnv) -> String {
    let out = env.run(&["runs", "--json"]);
    out.expect(0);
    out.stdout
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_encoded_bytes()).expect("no NUL in a temp path")
}

#[test]
fn a_link_is_written_through_and_stays_a_link() {
    let (env, run_id) = env_with_run();
    for (i, (what, _)) in writers(&env, &run_id, Path::new("x")).iter().enumerate() {
        let target = env.path(&format!("target-{i}.html"));
        let link = env.path(&format!("link-{i}.html"));
        fs::write(&target, "old").unwrap();
        symlink(&target, &link).unwrap();
        let args = writers(&env, &run_id, &link).remove(i).1;
        run(&env, &args).expect(0);
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{what}: the link was replaced"
        );
        let written = fs::read_to_string(&target).unwrap();
        assert!(
            written.len() > 20 && written != "old",
            "{what}: {written:?}"
        );
    }
}

#[test]
fn a_link_to_nothing_is_refused_with_one_line_and_nothing_is_created() {
    let (env, run_id) = env_with_run();
    let missing = env.path("missing.html");
    let link = env.path("dangling.html");
    symlink(&missing, &link).unwrap();
    for (what, args) in writers(&env, &run_id, &link) {
        let out = run(&env, &args);
        out.expect(2);
        let line = out.one_error_line();
        assert!(
            line.contains("it is a link to a file that does not exist"),
            "{what}: {line}"
        );
        assert!(!missing.exists(), "{what} created the link's target");
    }
}

#[test]
fn a_fifo_is_written_in_place_and_stays_a_fifo() {
    let (env, run_id) = env_with_run();
    let fifo = env.path("pipe.html");
    // SAFETY: the path is a valid NUL-terminated string for the call.
    assert_eq!(unsafe { libc::mkfifo(c_path(&fifo).as_ptr(), 0o600) }, 0);
    for (what, args) in writers(&env, &run_id, &fifo) {
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || fs::read(fifo).unwrap())
        };
        run(&env, &args).expect(0);
        let read = reader.join().unwrap();
        assert!(read.len() > 20, "{what}: {} bytes", read.len());
        assert!(
            fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(),
            "{what}: the FIFO was replaced"
        );
    }
}

/// A character device made in the test's own folder (never the system's `/dev` nodes).
fn char_device(dir: &Path, name: &str, major: u32, minor: u32) -> PathBuf {
    let path = dir.join(name);
    let dev = libc::makedev(major, minor);
    // SAFETY: the path is a valid NUL-terminated string for the call.
    let rc = unsafe { libc::mknod(c_path(&path).as_ptr(), libc::S_IFCHR | 0o666, dev) };
    assert_eq!(rc, 0, "mknod {}", path.display());
    path
}

#[test]
fn devices_are_written_in_place_and_a_full_one_is_one_line() {
    if !is_root() {
        eprintln!("skipped: making device nodes with mknod needs root");
        return;
    }
    let (env, run_id) = env_with_run();
    let null = char_device(&env.work(), "null.html", 1, 3);
    let full = char_device(&env.work(), "full.html", 1, 7);
    for (what, args) in writers(&env, &run_id, &null) {
        run(&env, &args).expect(0);
        assert!(
            fs::symlink_metadata(&null)
                .unwrap()
                .file_type()
                .is_char_device(),
            "{what}: the null device was replaced"
        );
    }
    for (what, args) in writers(&env, &run_id, &full) {
        let before = stored_runs(&env);
        let out = run(&env, &args);
        out.expect(2);
        let line = out.one_error_line();
        assert!(line.contains("No space left on device"), "{what}: {line}");
        assert!(
            fs::symlink_metadata(&full)
                .unwrap()
                .file_type()
                .is_char_device(),
            "{what}: the full device was replaced"
        );
        if what == "report -o" || what == "export -o" {
            assert_eq!(stored_runs(&env), before, "{what} changed the stored runs");
        }
    }
}

#[test]
fn a_read_only_folder_is_one_line_and_exit_2() {
    if is_root() {
        eprintln!("skipped: root writes into a read-only folder");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let (env, run_id) = env_with_run();
    let dir = env.path("ro");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o555)).unwrap();
    for (what, args) in writers(&env, &run_id, &dir.join("out.html")) {
        let before = stored_runs(&env);
        let out = run(&env, &args);
        out.expect(2);
        let line = out.one_error_line();
        assert!(line.contains("ermission denied"), "{what}: {line}");
        if what == "report -o" || what == "export -o" {
            assert_eq!(stored_runs(&env), before, "{what} changed the stored runs");
        }
    }
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
}

/// `diag store copy` writes a run store, not an output file: a destination that is a FIFO, a
/// device or a link to nothing is refused with one line and exit 2, is left what it was, and
/// the source store is unchanged.
#[test]
fn store_copy_into_a_special_file_is_one_line_and_changes_nothing() {
    let (env, _run_id) = env_with_run();
    let db = env.db().display().to_string();
    let fifo = env.path("pipe.db");
    // SAFETY: the path is a valid NUL-terminated string for the call.
    assert_eq!(unsafe { libc::mkfifo(c_path(&fifo).as_ptr(), 0o600) }, 0);
    let dangling = env.path("dangling.db");
    symlink(env.path("missing/x.db"), &dangling).unwrap();
    let mut targets = vec![("a FIFO", fifo.clone()), ("a link to nothing", dangling)];
    if is_root() {
        targets.push(("a null device", char_device(&env.work(), "null.db", 1, 3)));
    } else {
        eprintln!("skipped the device case: making device nodes with mknod needs root");
    }
    for (what, target) in targets {
        let before = stored_runs(&env);
        let kind = fs::symlink_metadata(&target).unwrap().file_type();
        let to = target.display().to_string();
        let out = env.run(&["store", "copy", "--from", &db, "--to", &to]);
        out.expect(2);
        let line = out.one_error_line();
        assert!(line.starts_with("diag: cannot "), "{what}: {line}");
        assert!(line.contains(&to), "{what}: {line}");
        assert_eq!(
            fs::symlink_metadata(&target).unwrap().file_type(),
            kind,
            "{what} was replaced"
        );
        assert_eq!(stored_runs(&env), before, "{what}: the source changed");
    }
    assert!(!env.path("missing").exists());
}

/// A file in a folder that does not exist: every file writer names the folder in one line (never
/// the temporary file it would have written first), exit 2, and the stored runs are unchanged.
#[test]
fn a_missing_folder_is_named_by_every_writer_in_one_line() {
    let (env, run_id) = env_with_run();
    let missing = env.path("missing");
    for (what, args) in writers(&env, &run_id, &missing.join("out.html")) {
        if what == "replay --report-dir" {
            continue; // a folder option: replay creates the folder it is given
        }
        let before = stored_runs(&env);
        let out = run(&env, &args);
        out.expect(2);
        let line = out.one_error_line();
        assert!(
            line.contains(&format!("the folder {} does not exist", missing.display())),
            "{what}: {line}"
        );
        assert!(!line.contains(".tmp"), "{what}: {line}");
        if what == "report -o" || what == "export -o" {
            assert_eq!(stored_runs(&env), before, "{what} changed the stored runs");
        }
    }
    assert!(!missing.exists(), "no writer creates the folder");
}

/// Decided once for every output file: a new one follows the umask, as a shell's `>` would
/// (reports, run files and JUnit XML are written to be shared); an existing one keeps its mode.
#[test]
fn new_output_files_follow_the_umask_and_existing_ones_keep_their_mode() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let (env, run_id) = env_with_run();
    for (umask, mode) in [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)] {
        let dir = env.path(&format!("umask-{umask:o}"));
        fs::create_dir(&dir).unwrap();
        for (what, args) in writers(&env, &run_id, &dir.join("out.html")) {
            if what == "replay --report-dir" {
                continue; // writes into `dir` under its own name, checked below
            }
            let target = dir.join("out.html");
            let _ = fs::remove_file(&target);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = env.run_with(&args, |c| {
                // SAFETY: umask is async-signal-safe and touches only the child.
                unsafe {
                    c.pre_exec(move || {
                        libc::umask(umask);
                        Ok(())
                    });
                }
            });
            out.expect(0);
            let got = fs::metadata(&target).unwrap().permissions().mode() & 0o777;
            assert_eq!(got, mode, "{what} under umask {umask:o}: {got:o}");
        }
    }
    // An existing file keeps its own mode, whatever the umask.
    let kept = env.path("kept.json");
    fs::write(&kept, "old").unwrap();
    fs::set_permissions(&kept, fs::Permissions::from_mode(0o604)).unwrap();
    let kept_arg = kept.display().to_string();
    env.run(&["export", &run_id, "-o", &kept_arg]).expect(0);
    assert_eq!(
        fs::metadata(&kept).unwrap().permissions().mode() & 0o777,
        0o604
    );
}
