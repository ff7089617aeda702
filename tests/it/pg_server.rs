//! The PostgreSQL 15 server the run store's tests share (`diag_testkit::postgres`): it is the
//! Debian package's server, listens on 127.0.0.1 only, does not run as root, authenticates
//! `diag_pw` by password and `diag` by trust, admits `diag_tls` over verified TLS only, hands
//! out distinct empty databases, fails (never skips) without an installation, and is gone when
//! its test process ends, however it ends.
//! The last is checked on test processes of their own: this binary re-run with
//! `child_process_role`.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use diag_testkit::bounded;
use diag_testkit::postgres::{self, server, PgServer};

/// The role a re-run of this binary plays (`exit` or `killed`); unset in a normal run.
const ROLE: &str = "DIAG_PG_HARNESS_ROLE";

/// The postmaster's pid and the temporary directory of `server`, from the data directory's
/// `postmaster.pid` as the server reports it.
fn postmaster(server: &PgServer) -> (libc::pid_t, PathBuf) {
    let data = PathBuf::from(
        server
            .psql(&server.fresh_db(), "SHOW data_directory")
            .trim(),
    );
    let pid_file = std::fs::read_to_string(data.join("postmaster.pid")).unwrap();
    let pid = pid_file.lines().next().unwrap().trim().parse().unwrap();
    (pid, data.parent().unwrap().to_path_buf())
}

/// Real, effective, saved and filesystem uid of a process, from `/proc`.
fn process_uids(pid: libc::pid_t) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .expect("a Uid line")
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect()
}

/// psql as a client of `url`, with `password` (or none) in PGPASSWORD and no password file.
fn client(url: &str, password: Option<&str>, sql: &str) -> std::process::Output {
    let mut cmd = postgres::psql_command(url);
    cmd.args(["-c", sql])
        .env("PGPASSFILE", "/nonexistent/diag-pgpass");
    if let Some(password) = password {
        cmd.env("PGPASSWORD", password);
    }
    bounded::output(&mut cmd, bounded::LIMIT)
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn answers_as_postgresql_15() {
    let server = server();
    let db = server.fresh_db();
    let version = server.psql(&db, "SELECT version()");
    assert!(version.starts_with("PostgreSQL 15."), "{version}");
    let number: u32 = server
        .psql(&db, "SHOW server_version_num")
        .trim()
        .parse()
        .unwrap();
    assert!((150000..160000).contains(&number), "{number}");
}

#[test]
fn listens_on_loopback_only_with_its_socket_in_its_directory() {
    let server = server();
    let db = server.fresh_db();
    assert_eq!(
        server.psql(&db, "SHOW listen_addresses").trim(),
        "127.0.0.1"
    );
    assert_eq!(
        server.psql(&db, "SHOW port").trim(),
        server.port().to_string()
    );
    assert!(
        db.starts_with(&format!("postgres://diag@127.0.0.1:{}/", server.port())),
        "{db}"
    );
    let (_, dir) = postmaster(server);
    assert_eq!(
        server.psql(&db, "SHOW unix_socket_directories").trim(),
        dir.display().to_string()
    );
    assert_eq!(server.log().parent(), Some(dir.as_path()));
    assert!(dir.starts_with(std::env::temp_dir()), "{}", dir.display());
    // The address the server reports for this very connection.
    assert_eq!(
        server.psql(&db, "SELECT host(inet_server_addr())").trim(),
        "127.0.0.1"
    );
}

#[test]
fn the_server_does_not_run_as_root() {
    let server = server();
    let (pid, dir) = postmaster(server);
    let uids = process_uids(pid);
    assert_eq!(uids.len(), 4, "{uids:?}");
    // SAFETY: geteuid has no preconditions.
    let ours = unsafe { libc::geteuid() };
    if ours == 0 {
        // As the `postgres` user, who owns the data directory initdb made.
        let data_owner = std::fs::metadata(dir.join("data")).unwrap().uid();
        assert_ne!(data_owner, 0);
        assert!(uids.iter().all(|&u| u == data_owner), "{uids:?}");
    } else {
        assert!(uids.iter().all(|&u| u == ours), "{uids:?}");
    }
    assert!(uids.iter().all(|&u| u != 0), "{uids:?}");
}

#[test]
fn the_password_role_authenticates_by_password_only() {
    let server = server();
    let url = server.fresh_db_password();
    let prefix = format!("postgres://diag_pw@127.0.0.1:{}/", server.port());
    assert!(url.starts_with(&prefix), "{url}");
    assert!(!url[prefix.len()..].contains(['@', ':']), "{url}");

    let sql = "SELECT current_user, pg_get_userbyid(datdba) FROM pg_database \
               WHERE datname = current_database()";
    let right = client(&url, Some(server.password()), sql);
    assert!(
        right.status.success(),
        "{}",
        String::from_utf8_lossy(&right.stderr)
    );
    assert_eq!(stdout(&right), "diag_pw|diag_pw");
    // The role owns its database: it creates tables in `public`.
    let create = client(
        &url,
        Some(server.password()),
        "CREATE TABLE runs (id text PRIMARY KEY)",
    );
    assert!(
        create.status.success(),
        "{}",
        String::from_utf8_lossy(&create.stderr)
    );

    let wrong = client(&url, Some("not-the-password"), "SELECT 1");
    assert!(!wrong.status.success());
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        stderr.contains("password authentication failed for user \"diag_pw\""),
        "{stderr}"
    );
    let none = client(&url, None, "SELECT 1");
    assert!(!none.status.success());
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert!(stderr.contains("no password supplied"), "{stderr}");

    // The password is stored as SCRAM; `diag` is the superuser, `diag_pw` is not.
    let roles = server.psql(
        &url,
        "SELECT rolname, rolsuper, rolcreatedb, left(rolpassword, 14) FROM pg_authid \
         WHERE rolname LIKE 'diag%' ORDER BY rolname",
    );
    assert_eq!(
        roles,
        "diag|t|t|\ndiag_pw|f|t|SCRAM-SHA-256$\ndiag_tls|f|t|\n"
    );
}

#[test]
fn the_tls_role_is_admitted_over_verified_tls_only() {
    let server = server();
    let url = server.fresh_db_tls();
    let prefix = format!("postgres://diag_tls@127.0.0.1:{}/", server.port());
    assert!(url.starts_with(&prefix), "{url}");
    let ca = server.ca_file();
    assert!(
        std::fs::read_to_string(&ca)
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----"),
        "{}",
        ca.display()
    );

    // libpq's strictest mode: the certificate chains to the CA and names 127.0.0.1.
    let sql = "SELECT current_user, pg_get_userbyid(datdba), ssl FROM pg_database, pg_stat_ssl \
               WHERE datname = current_database() AND pid = pg_backend_pid()";
    for host in ["127.0.0.1", "localhost"] {
        let verified = format!(
            "{}?sslmode=verify-full&sslrootcert={}",
            url.replacen("127.0.0.1", host, 1),
            ca.display()
        );
        let out = client(&verified, None, sql);
        assert!(
            out.status.success(),
            "{host}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout(&out), "diag_tls|diag_tls|t");
    }
    // Plain text is refused by the `hostnossl … reject` line.
    let plain = client(&format!("{url}?sslmode=disable"), None, "SELECT 1");
    assert!(!plain.status.success());
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(
        stderr.contains("pg_hba.conf rejects connection for host \"127.0.0.1\", user \"diag_tls\"")
            && stderr.contains("no encryption"),
        "{stderr}"
    );
    // The other roles are still served in plain text.
    let other = client(&format!("{}?sslmode=disable", server.fresh_db()), None, sql);
    assert!(
        other.status.success(),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    assert_eq!(stdout(&other), "diag|diag|f");

    // The CA's key is gone; the server's key is the server user's alone.
    let tls = ca.parent().unwrap();
    assert!(!tls.join("ca.key").exists());
    let key = std::fs::metadata(tls.join("server.key")).unwrap();
    assert_eq!(key.permissions().mode() & 0o777, 0o600);
    let (_, dir) = postmaster(server);
    assert_eq!(
        key.uid(),
        std::fs::metadata(dir.join("data")).unwrap().uid()
    );
    assert_eq!(server.psql(&url, "SHOW ssl").trim(), "on");
}

#[test]
fn fresh_databases_are_distinct_and_empty() {
    let server = server();
    let urls = [
        server.fresh_db(),
        server.fresh_db(),
        server.fresh_db_password(),
    ];
    let names: Vec<String> = urls
        .iter()
        .map(|u| {
            server
                .psql(u, "SELECT current_database()")
                .trim()
                .to_string()
        })
        .collect();
    assert!(
        names[0] != names[1] && names[1] != names[2] && names[0] != names[2],
        "{names:?}"
    );
    for (url, name) in urls.iter().zip(&names) {
        assert!(url.ends_with(&format!("/{name}")), "{url} {name}");
    }
    let user_relations = "SELECT count(*) FROM pg_class c JOIN pg_namespace n \
                          ON n.oid = c.relnamespace WHERE n.nspname NOT IN \
                          ('pg_catalog', 'information_schema', 'pg_toast')";
    for url in &urls {
        assert_eq!(server.psql(url, user_relations).trim(), "0", "{url}");
    }
    server.psql(
        &urls[0],
        "CREATE TABLE runs (id text); INSERT INTO runs VALUES ('a');",
    );
    assert_eq!(server.psql(&urls[0], "SELECT id FROM runs"), "a\n");
    assert_eq!(server.psql(&urls[1], user_relations).trim(), "0");
    let owner =
        "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()";
    assert_eq!(server.psql(&urls[0], owner), "diag\n");
    assert_eq!(server.psql(&urls[2], owner), "diag_pw\n");
}

#[test]
fn fresh_databases_from_parallel_threads_are_distinct() {
    let server = server();
    let urls: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8).map(|_| s.spawn(|| server.fresh_db())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let distinct: std::collections::BTreeSet<&String> = urls.iter().collect();
    assert_eq!(distinct.len(), urls.len(), "{urls:?}");
    for url in &urls {
        let name = url.rsplit('/').next().unwrap();
        assert_eq!(server.psql(url, "SELECT current_database()").trim(), name);
    }
}

#[test]
fn psql_reports_the_failing_statement() {
    let server = server();
    let db = server.fresh_db();
    let failed = std::panic::catch_unwind(|| server.psql(&db, "SELECT 1; SELECT * FROM nowhere;"))
        .expect_err("psql fails");
    let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("relation \"nowhere\" does not exist"),
        "{message}"
    );
    assert!(
        message.contains(&server.log().display().to_string()),
        "{message}"
    );
}

#[test]
fn a_missing_installation_fails_naming_the_installer() {
    postgres::check_installation(Path::new(postgres::BIN_DIR)).unwrap();
    let missing = Path::new("/nonexistent/postgresql/15/bin");
    let message = postgres::check_installation(missing).unwrap_err();
    assert!(message.contains("scripts/install-peers"), "{message}");
    assert!(message.contains("postgresql-15"), "{message}");
    assert!(
        message.contains("/nonexistent/postgresql/15/bin/postgres"),
        "{message}"
    );
}

/// Kills the re-run when the test ends, however it ends; and a postmaster left running by a
/// failed check, so that a failure here leaves no server behind.
struct Guard {
    child: Option<Child>,
    postmaster: Option<libc::pid_t>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(pid) = self.postmaster.filter(|&p| postgres::is_running(p)) {
            // SAFETY: a signal to the postmaster this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A temporary folder of the test's own for a re-run's TMPDIR, so that no other process's
/// server start sweeps what the re-run leaves; searchable by others, as the `postgres` user
/// must reach the server's directory inside it.
fn own_tmp() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    tmp
}

/// This binary re-run as a test process of its own, in `role`, with `tmp` as its TMPDIR, once
/// it has reported its server's postmaster pid and temporary directory.
fn rerun(role: &str, tmp: &Path) -> (Guard, libc::pid_t, PathBuf) {
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            format!("{module}::child_process_role").as_str(),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env("TMPDIR", tmp)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut guard = Guard {
        child: Some(child),
        postmaster: None,
    };
    let stdout = guard.child.as_mut().unwrap().stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest's `test … ... ` starts the line.
            if let Some((_, rest)) = line.split_once("SERVER ") {
                let _ = tx.send(rest.to_string());
            }
        }
    });
    // Generous: the re-run starts a server of its own on a machine busy with the suite.
    let line = rx
        .recv_timeout(Duration::from_secs(180))
        .expect("the re-run reports its server");
    let (pid, dir) = line.split_once(' ').unwrap();
    let pid: libc::pid_t = pid.parse().unwrap();
    guard.postmaster = Some(pid);
    (guard, pid, PathBuf::from(dir))
}

/// Not a test of its own: what a re-run of this binary does (see [`rerun`]); ignored in a
/// normal run, selected by the re-run with `--ignored --exact`.
#[test]
#[ignore = "the entry point of a re-run of this binary, which the tests that need it start"]
fn child_process_role() {
    let Ok(role) = std::env::var(ROLE) else {
        eprintln!("child_process_role runs only as a re-run of this binary ({ROLE} unset)");
        return;
    };
    let (pid, dir) = postmaster(server());
    println!("SERVER {pid} {}", dir.display());
    if role == "killed" {
        // Until the test kills this process (or drops its stdin).
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    }
}

#[test]
fn an_exiting_test_process_stops_its_server_and_removes_its_directory() {
    let tmp = own_tmp();
    let (mut guard, pid, dir) = rerun("exit", tmp.path());
    assert_eq!(dir.parent(), Some(tmp.path()));
    assert!(dir.join("data").is_dir(), "{}", dir.display());
    let child = guard.child.take().unwrap();
    let status = bounded::wait_with_output(child, bounded::LIMIT, "the re-run").status;
    assert!(status.success(), "{status}");
    // The exit handler waited for the postmaster before the process ended.
    assert!(!postgres::is_running(pid), "postmaster {pid} still runs");
    assert!(!dir.exists(), "{} is left", dir.display());
}

#[test]
fn a_killed_test_process_stops_its_server() {
    let tmp = own_tmp();
    let (mut guard, pid, dir) = rerun("killed", tmp.path());
    assert_eq!(dir.parent(), Some(tmp.path()));
    assert!(postgres::is_running(pid));
    let child = guard.child.as_mut().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    // The parent-death signal: a fast shutdown, polled until done (bounded).
    let deadline = Instant::now() + bounded::LIMIT;
    while postgres::is_running(pid) {
        assert!(
            Instant::now() < deadline,
            "postmaster {pid} still runs {:?} after its test process was killed",
            bounded::LIMIT
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its directory stays behind until a server start sweeps it.
    assert!(dir.is_dir(), "{}", dir.display());
    postgres::sweep_stale(tmp.path());
    assert!(!dir.exists(), "{} is left", dir.display());
}
