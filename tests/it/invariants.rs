//! Architecture invariants checked by scanning the sources (ARCHITECTURE.md names each test):
//!
//! - which crates reach the file system, child processes and the network (`std::fs`,
//!   `std::process`, `std::net` and tokio's `fs`, `process`, `net`): the pure crates none;
//! - the pure crates keep no process-wide mutable state;
//! - every crate root and binary denies `unwrap`/`expect` outside tests;
//! - no integration test, in any crate's `tests/` or in `diag-testkit`, waits for an amount of
//!   time: a sleep is a poll interval inside a loop bounded by a deadline, or is on a short
//!   allow-list with its reason.
//!
//! The scan is textual, over rustfmt-formatted code: comment lines are skipped, and so is
//! every item under a `#[cfg(test)]` (or `#[cfg(all(test, …))]`) attribute, together with the
//! files of a module declared that way (`#[cfg(test)] mod tests;`). A crate's unit tests may
//! use what they like, and so may the crates of test code ([`TEST_CODE`]) outside the sleep
//! check.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

// The crates that are test code (never part of a shipped binary, `layering.rs` checks): the
// rules for shipped code about I/O and printing do not apply to them; the rules for tests do,
// and so does the denial of `unwrap`/`expect` (a helper says what it could not do).
use crate::layering::TEST_CODE;

/// The crates that do no I/O of their own: no file, process or network module of std or tokio.
const PURE: &[&str] = &[
    "diag-graph",
    "diag-records",
    "diag-alertmanager",
    "diag-store",
    "diag-protocol",
    "diag-core",
    "diag-diagnosis",
    "diag-report",
    "diag-runfile",
];

/// The other crates: which of `fs`, `process`, `net` each may use, and why.
const IO: &[(&str, &[&str], &str)] = &[
    ("diag-ask", &["fs"], "reads the configuration file"),
    (
        "diag-eval",
        &["fs", "process", "net"],
        "scenario files; promtool and Prometheus as children, on a free local port",
    ),
    (
        "diag-owner",
        &["fs", "process"],
        "/proc and /etc/machine-id; this process's id",
    ),
    (
        "diag-store-sqlite",
        &["fs"],
        "the store file and its folder",
    ),
    (
        "diag-store-postgres",
        &["fs"],
        "the password file and PGSSLROOTCERT (the network is tokio-postgres's)",
    ),
    (
        "diag-tools",
        &["fs", "process"],
        "log and runbook files; MCP servers as child processes (HTTP is reqwest's)",
    ),
    ("diag-model-openai", &[], "HTTP through reqwest only"),
    (
        "diag-alerts",
        &["net"],
        "Alertmanager's API and the result webhook through reqwest; the listener of diag serve",
    ),
    (
        "diag-mcp",
        &[],
        "stdin and stdout through rmcp's transport only",
    ),
    (
        "diag-bench",
        &["fs", "process"],
        "the benchmark binary: corpora and stores on disk, rg and diag as children, /proc",
    ),
];

const IO_MODULES: &[&str] = &["fs", "process", "net"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `path` relative to the repository, for messages.
fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Whether a line is an attribute that compiles what follows for tests only.
fn is_test_cfg(line: &str) -> bool {
    let t = line.trim();
    t.starts_with("#[cfg(") && !t.contains("not(test)") && {
        let inner = &t["#[cfg(".len()..];
        inner
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == "test")
    }
}

/// A file's code as the build outside tests sees it: `(line number, line)` for every line that
/// is neither a comment nor part of a test-only item, and the names of the modules declared
/// test-only without a body (`#[cfg(test)] mod tests;`), whose files are test code too.
fn code_lines(text: &str) -> (Vec<(usize, &str)>, Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let mut code = Vec::new();
    let mut test_mods = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if is_test_cfg(line) {
            let k = indent(line);
            let mut j = i + 1;
            while j < lines.len() && lines[j].trim().starts_with("#[") {
                j += 1;
            }
            let item = lines.get(j).map(|l| l.trim()).unwrap_or("");
            let one_line = item.ends_with(';')
                || (item.ends_with('}') && item.matches('{').count() == item.matches('}').count());
            if one_line {
                if let Some(name) = item
                    .strip_prefix("mod ")
                    .or_else(|| item.strip_prefix("pub mod "))
                    .and_then(|n| n.strip_suffix(';'))
                {
                    test_mods.push(name.trim().to_string());
                }
            } else {
                // A block item: up to its closing brace at the attribute's indentation.
                j += 1;
                while j < lines.len()
                    && !(indent(lines[j]) == k && lines[j].trim().starts_with('}'))
                {
                    j += 1;
                }
            }
            i = j + 1;
            continue;
        }
        if !line.trim_start().starts_with("//") {
            code.push((i + 1, line));
        }
        i += 1;
    }
    (code, test_mods)
}

/// The files of the modules `file` declares test-only (`#[cfg(test)] mod NAME;`).
fn test_module_files(file: &Path, names: &[String]) -> Vec<PathBuf> {
    let stem = file.file_stem().unwrap().to_string_lossy();
    let parent = file.parent().unwrap();
    let dir = if ["lib", "main", "mod"].contains(&stem.as_ref()) {
        parent.to_path_buf()
    } else {
        parent.join(stem.as_ref())
    };
    names
        .iter()
        .flat_map(|n| [dir.join(format!("{n}.rs")), dir.join(n)])
        .collect()
}

/// The non-test code of every `.rs` file under `dir`: `(file, [(line number, line)])`.
pub(crate) fn non_test_code(dir: &Path) -> Vec<(PathBuf, Vec<(usize, String)>)> {
    let files = rust_files(dir);
    let mut scanned = Vec::new();
    let mut test_only: Vec<PathBuf> = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let (code, mods) = code_lines(&text);
        test_only.extend(test_module_files(file, &mods));
        let code = code.into_iter().map(|(n, l)| (n, l.to_string())).collect();
        scanned.push((file.clone(), code));
    }
    scanned
        .into_iter()
        .filter(|(f, _)| !test_only.iter().any(|t| f.starts_with(t)))
        .collect()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The I/O modules `stmt` names: `std::fs`, `tokio::process::Command`, and the items of a
/// grouped import (`use std::{fs, io}`), as `std::fs`.
fn io_paths(stmt: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for krate in ["std", "tokio"] {
        let prefix = format!("{krate}::");
        for (at, _) in stmt.match_indices(&prefix) {
            if stmt[..at].chars().next_back().is_some_and(is_ident) {
                continue;
            }
            let rest = &stmt[at + prefix.len()..];
            for module in IO_MODULES {
                if rest.starts_with(module) && !rest[module.len()..].starts_with(is_ident) {
                    found.insert(format!("{krate}::{module}"));
                }
            }
            // `std::{fs, io::Write}`: the top-level names inside the braces.
            if let Some(group) = rest.strip_prefix('{') {
                let mut depth = 0;
                let mut items = vec![String::new()];
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            items.push(String::new());
                            continue;
                        }
                        _ => {}
                    }
                    items.last_mut().unwrap().push(c);
                }
                for item in items {
                    let name: String = item.trim().chars().take_while(|&c| is_ident(c)).collect();
                    if IO_MODULES.contains(&name.as_str()) {
                        found.insert(format!("{krate}::{name}"));
                    }
                }
            }
        }
    }
    found
}

/// Every use of an I/O module in `code`: `(line number, "std::fs")`. A `use` statement that
/// spans lines is read whole and reported at its first line.
fn io_uses(code: &[(usize, String)]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (n, line) in code {
        let t = line.trim();
        if let Some((start, stmt)) = pending.as_mut() {
            stmt.push_str(t);
            if t.ends_with(';') {
                out.extend(io_paths(stmt).into_iter().map(|p| (*start, p)));
                pending = None;
            }
            continue;
        }
        let is_use = ["use ", "pub use ", "pub(crate) use "]
            .iter()
            .any(|p| t.starts_with(p));
        if is_use && !t.ends_with(';') {
            pending = Some((*n, t.to_string()));
            continue;
        }
        out.extend(io_paths(t).into_iter().map(|p| (*n, p)));
    }
    out
}

/// Every file, process or network use in `crates/*/src` outside tests that the crate's rule
/// does not allow, `file:line` each.
fn io_violations() -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let allowed: &[&str] = if TEST_CODE.contains(&name.as_str()) {
            continue;
        } else if PURE.contains(&name.as_str()) {
            &[]
        } else if let Some((_, allowed, _)) = IO.iter().find(|(n, _, _)| *n == name) {
            allowed
        } else {
            let what = "no I/O rule: add it to PURE or IO in tests/it/invariants.rs (or TEST_CODE in layering.rs)"
                .to_string();
            found.push((format!("crates/{name}"), 0, what));
            continue;
        };
        for (file, code) in non_test_code(&dir.join("src")) {
            for (n, path) in io_uses(&code) {
                let module = path.rsplit("::").next().unwrap_or_default();
                if !allowed.contains(&module) {
                    let may = if allowed.is_empty() {
                        "none of fs, process, net".to_string()
                    } else {
                        allowed.join(", ")
                    };
                    let what = format!("{path} ({name} may use {may})");
                    found.push((shown(&file), n, what));
                }
            }
        }
    }
    found.sort();
    found
        .into_iter()
        .map(|(file, n, what)| format!("{file}:{n}: {what}"))
        .collect()
}

#[test]
fn only_the_adapter_crates_reach_files_processes_and_the_network() {
    let found = io_violations();
    assert!(
        found.is_empty(),
        "file, process or network use outside what the crate's rule allows \
         (tests/it/invariants.rs, PURE and IO):\n{}",
        found.join("\n")
    );
}

/// What writes to the terminal: the print macros and std's handles on stdout and stderr.
const PRINTS: &[&str] = &[
    "println!",
    "print!",
    "eprintln!",
    "eprint!",
    "io::stdout()",
    "io::stderr()",
];

#[test]
fn no_library_crate_prints() {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let src = dir.join("src");
        // A binary's own code (a crate without a library, `main.rs`, `bin/`) may print, and so
        // may test code.
        if !src.join("lib.rs").is_file() || is_test_code(&dir) {
            continue;
        }
        for (file, code) in non_test_code(&src) {
            if file == src.join("main.rs") || file.starts_with(src.join("bin")) {
                continue;
            }
            for (n, line) in code {
                let printing = PRINTS.iter().any(|p| {
                    line.match_indices(p)
                        .any(|(at, _)| !line[..at].chars().next_back().is_some_and(is_ident))
                });
                if printing {
                    found.push(format!("{}:{n}: {}", shown(&file), line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "a library crate writes to the terminal (return the text; the CLI prints it):\n{}",
        found.join("\n")
    );
}

/// Types that make a `static` mutable (and every `Atomic…`).
const MUTABLE: &[&str] = &["Mutex", "RwLock", "Cell", "RefCell", "UnsafeCell"];

/// Whether the declaration `declared` (`static NAME: TYPE`) names a mutable type.
fn names_mutable_type(declared: &str) -> bool {
    declared
        .split(|c: char| !is_ident(c))
        .any(|w| MUTABLE.contains(&w) || w.starts_with("Atomic"))
}

/// Process-wide mutable state in `code`: a `static mut`, a `thread_local!`, or a `static`
/// whose type holds a lock, an atomic or a cell. (A `OnceLock`/`LazyLock` that computes a
/// constant once is not mutable state.)
fn mutable_statics(code: &[(usize, String)]) -> Vec<(usize, String)> {
    code.iter()
        .filter(|(_, line)| {
            let t = line.trim();
            let t = t
                .strip_prefix("pub(crate) ")
                .or_else(|| t.strip_prefix("pub "))
                .unwrap_or(t);
            let declared = t.split('=').next().unwrap_or_default();
            t.contains("thread_local!")
                || t.starts_with("static mut ")
                || (t.starts_with("static ") && names_mutable_type(declared))
        })
        .map(|(n, line)| (*n, line.trim().to_string()))
        .collect()
}

#[test]
fn the_pure_crates_keep_no_process_wide_mutable_state() {
    let mut found = Vec::new();
    for name in PURE {
        for (file, code) in non_test_code(&root().join("crates").join(name).join("src")) {
            for (n, line) in mutable_statics(&code) {
                found.push(format!("{}:{n}: {line}", shown(&file)));
            }
        }
    }
    assert!(
        found.is_empty(),
        "process-wide mutable state in a pure crate (pass it in instead):\n{}",
        found.join("\n")
    );
}

/// The attribute every crate root and binary carries (whitespace aside).
const NO_UNWRAP: &str = "#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]";

/// Whether the crate in `dir` is one of [`TEST_CODE`].
fn is_test_code(dir: &Path) -> bool {
    dir.file_name()
        .is_some_and(|n| TEST_CODE.iter().any(|t| n == *t))
}

/// The roots of every crate and binary of the workspace, the test code's included.
fn crate_roots() -> Vec<PathBuf> {
    let mut srcs = vec![root().join("src")];
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        srcs.push(entry.unwrap().path().join("src"));
    }
    let mut roots = Vec::new();
    for src in srcs {
        roots.extend(
            [src.join("lib.rs"), src.join("main.rs")]
                .into_iter()
                .filter(|p| p.is_file()),
        );
        if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
            roots.extend(
                bins.map(|e| e.unwrap().path())
                    .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs")),
            );
        }
    }
    roots.sort();
    roots
}

#[test]
fn every_crate_root_denies_unwrap_and_expect_outside_tests() {
    let squeeze = |s: &str| s.split_whitespace().collect::<String>();
    let wanted = squeeze(NO_UNWRAP);
    let roots = crate_roots();
    assert!(roots.len() >= 14, "{roots:?}");
    let missing: Vec<String> = roots
        .iter()
        .filter(|p| !squeeze(&std::fs::read_to_string(p).unwrap()).contains(&wanted))
        .map(|p| shown(p))
        .collect();
    assert!(
        missing.is_empty(),
        "crate roots without `{NO_UNWRAP}`:\n{}",
        missing.join("\n")
    );
}

/// Sleeps that are not a poll interval in a deadline-bounded loop, each with why it may stay:
/// `(file, relative to the repository, enclosing function, reason)`.
const SLEEPS_ALLOWED: &[(&str, &str, &str)] = &[
    (
        "crates/diag-tools/tests/it/tools_registry.rs",
        "call",
        "a scripted tool's own latency, which the registry's per-call timeout is tested \
         against: the test waits for the registry's answer, not for the time",
    ),
    (
        "tests/it/store_concurrency.rs",
        "child_process_role",
        "writer processes start at one agreed instant so that the migration race is likely; \
         the verdict does not depend on when they start",
    ),
];

/// A sleep call on this line (`thread::sleep(`, `time::sleep(`, a bare imported `sleep(`).
fn is_sleep(line: &str) -> bool {
    ["sleep(", "sleep_until("].iter().any(|call| {
        line.match_indices(call)
            .any(|(at, _)| !line[..at].chars().next_back().is_some_and(is_ident))
    })
}

/// The header line of the block `lines[i]` sits in: the nearest line above with less
/// indentation (a lone `{` after a multi-line condition stands for the line that opened it).
fn enclosing(lines: &[&str], i: usize, below: usize) -> Option<usize> {
    let mut j = i;
    while j > 0 {
        j -= 1;
        let l = lines[j];
        if l.trim().is_empty() || indent(l) >= below {
            continue;
        }
        // A lone `{` after a multi-line condition, or the `) -> T {` of a long signature.
        if l.trim() == "{" || l.trim_start().starts_with(')') {
            let k = indent(l);
            while j > 0 && (indent(lines[j - 1]) > k || lines[j - 1].trim().is_empty()) {
                j -= 1;
            }
            return j.checked_sub(1);
        }
        return Some(j);
    }
    None
}

/// Where the sleep at `lines[i]` is: `Ok(())` inside a loop whose text reads a deadline
/// (`deadline`, `.elapsed()`, `Instant::now()`), else `Err(enclosing function)`.
fn bounded_poll(lines: &[&str], i: usize) -> Result<(), String> {
    let mut below = indent(lines[i]);
    let mut at = i;
    while let Some(h) = enclosing(lines, at, below) {
        let header = lines[h].trim();
        if header.starts_with("fn ")
            || header.contains(" fn ")
            || header.starts_with("pub fn ")
            || header.starts_with("async fn ")
        {
            let name: String = header[header.find("fn ").unwrap() + 3..]
                .chars()
                .take_while(|&c| is_ident(c))
                .collect();
            return Err(name);
        }
        let is_loop = header.starts_with("loop {")
            || header.starts_with("while ")
            || header.contains("= loop {");
        if is_loop {
            let k = indent(lines[h]);
            let end = (h + 1..lines.len())
                .find(|&j| indent(lines[j]) == k && lines[j].trim().starts_with('}'))
                .unwrap_or(lines.len() - 1);
            let body = lines[h..=end].join("\n");
            if ["deadline", ".elapsed()", "Instant::now()"]
                .iter()
                .any(|m| body.contains(m))
            {
                return Ok(());
            }
        }
        below = indent(lines[h]);
        at = h;
    }
    Err(String::new())
}

/// Every sleep in `text` that is neither in a deadline-bounded loop nor allowed for
/// `file` (its path relative to the repository); also marks the allow-list entries used.
fn unbounded_sleeps(file: &str, text: &str, used: &mut BTreeSet<(String, String)>) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("//") || !is_sleep(line) {
            continue;
        }
        if let Err(function) = bounded_poll(&lines, i) {
            if SLEEPS_ALLOWED
                .iter()
                .any(|(f, func, _)| *f == file && *func == function)
            {
                used.insert((file.to_string(), function));
            } else {
                found.push(format!(
                    "{file}:{}: {} (in fn {function}: not a poll in a loop bounded \
                     by a deadline)",
                    i + 1,
                    line.trim()
                ));
            }
        }
    }
    found
}

/// Every folder of test code: the root's `tests/`, each crate's `tests/`, and the sources of
/// the [`TEST_CODE`] crates.
fn test_code_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![root().join("tests")];
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        dirs.push(dir.join("tests"));
        if is_test_code(&dir) {
            dirs.push(dir.join("src"));
        }
    }
    dirs.retain(|d| d.is_dir());
    dirs.sort();
    dirs
}

#[test]
fn no_test_waits_for_an_amount_of_time() {
    let mut found = Vec::new();
    let mut used = BTreeSet::new();
    let mut scanned = 0;
    for dir in test_code_dirs() {
        for file in rust_files(&dir) {
            let name = shown(&file);
            // This file's own fixtures hold sleeps on purpose.
            if name == "tests/it/invariants.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            found.extend(unbounded_sleeps(&name, &text, &mut used));
            scanned += 1;
        }
    }
    assert!(scanned >= 50, "the scan found the test sources ({scanned})");
    for (file, function, _) in SLEEPS_ALLOWED {
        if !used.contains(&(file.to_string(), function.to_string())) {
            found.push(format!(
                "SLEEPS_ALLOWED names {file} fn {function}, which no longer sleeps: remove the \
                 entry"
            ));
        }
    }
    assert!(
        found.is_empty(),
        "a test waits for an amount of time; wait for a condition, polling in a loop \
         bounded by a deadline:\n{}",
        found.join("\n")
    );
}

/// The checks themselves, on made-up sources.
#[test]
fn the_scans_find_what_they_should_and_skip_test_code() {
    let source = "\
use std::{
    fs,
    io::{self, Write},
};
use tokio::process::Command;
// std::net in a comment
fn f() {
    let _ = std::process::id();
    static LAST: std::sync::Mutex<u128> = std::sync::Mutex::new(0);
    static NAMES: &[&str] = &[];
    let _ = my_std::fs::x();
}
#[cfg(all(test, unix))]
mod tests {
    use std::net::TcpListener;
    static T: AtomicU32 = AtomicU32::new(0);
}
#[cfg(test)]
mod more;
fn g() {}
";
    let (code, mods) = code_lines(source);
    assert_eq!(mods, ["more"]);
    let code: Vec<(usize, String)> = code.into_iter().map(|(n, l)| (n, l.to_string())).collect();
    assert_eq!(
        io_uses(&code),
        [
            (1, "std::fs".to_string()),
            (5, "tokio::process".to_string()),
            (8, "std::process".to_string()),
        ]
    );
    assert_eq!(
        mutable_statics(&code),
        [(
            9,
            "static LAST: std::sync::Mutex<u128> = std::sync::Mutex::new(0);".to_string()
        )]
    );
    assert_eq!(
        test_module_files(Path::new("/c/src/a/mod.rs"), &mods),
        [
            PathBuf::from("/c/src/a/more.rs"),
            PathBuf::from("/c/src/a/more")
        ]
    );
    assert_eq!(
        test_module_files(Path::new("/c/src/b.rs"), &mods),
        [
            PathBuf::from("/c/src/b/more.rs"),
            PathBuf::from("/c/src/b/more")
        ]
    );

    let tests = "\
fn polls() {
    let deadline = Instant::now() + LIMIT;
    while !ready()
        .unwrap_or_default()
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = loop {
        match child.try_wait() {
            Ok(None) => {
                thread::sleep(pause);
            }
        }
        assert!(started.elapsed() < BOUND);
    };
}

async fn waits() {
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..10 {
        sleep(Duration::from_millis(50));
    }
}
";
    let mut used = BTreeSet::new();
    assert_eq!(
        unbounded_sleeps("tests/it/x.rs", tests, &mut used),
        [
            "tests/it/x.rs:20: tokio::time::sleep(Duration::from_millis(500)).await; \
             (in fn waits: not a poll in a loop bounded by a deadline)",
            "tests/it/x.rs:22: sleep(Duration::from_millis(50)); \
             (in fn waits: not a poll in a loop bounded by a deadline)",
        ]
    );
    assert!(used.is_empty());
}
