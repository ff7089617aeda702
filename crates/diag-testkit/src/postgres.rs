//! A real PostgreSQL 15 server for the tests of the PostgreSQL run store: the Debian package
//! `postgresql-15` (installed by `scripts/install-peers`), started by the suite itself, once per
//! test process, in a temporary directory, listening on 127.0.0.1 only, and stopped when the
//! process ends. A missing installation fails every test that asks for the server, naming the
//! command that installs it; it never skips one.
//!
//! **The server.** [`server`] starts it on first use: `initdb` into `$TMPDIR/diag-pg-<pid>/data`
//! (superuser `diag`, UTF-8, C locale), a `pg_hba.conf` of our own (below), then the postmaster
//! itself (`postgres -D …`, not `pg_ctl`, so that it stays this process's child) on a free port of
//! 127.0.0.1, with its Unix socket in the temporary directory and settings for a throwaway server
//! (`fsync=off`, `synchronous_commit=off`, `full_page_writes=off`, `max_connections=200`: the
//! concurrency tests run eight writer processes beside the tests in parallel), and
//! `log_connections=on`: each authorized connection is logged, with `SSL enabled` when TLS
//! carries it, before the client is told it is in. Readiness is polled with `pg_isready`
//! (bounded, 60 s). The server log is [`PgServer::log`].
//!
//! **Who runs it.** PostgreSQL refuses to run as root, and the tests run as root on CI: then
//! `initdb` and the postmaster run as the `postgres` system user the package creates (the
//! temporary directory is chown'ed to it; the spawn sets uid and gid, dropping supplementary
//! groups). As any other user they run as that user.
//!
//! **TLS.** The server also speaks TLS (`ssl=on`), with a certificate made for this process
//! only: at start the `openssl` command line (which Debian's PostgreSQL packages depend on)
//! makes a throwaway CA (P-256, two days) and a server certificate it signs for `127.0.0.1`
//! and `localhost`, in `<dir>/tls/`. The CA's key is deleted once the server certificate is
//! signed; the server's key is mode 0600 and owned by the user the server runs as, as
//! PostgreSQL demands. [`PgServer::ca_file`] is the CA certificate, for `PGSSLROOTCERT`. Clients
//! that do not ask for TLS (`sslmode=disable`, or `prefer` falling back) still connect in plain
//! text, except as `diag_tls`.
//!
//! **Authentication.** `diag` (superuser) connects by trust; `diag_pw` (LOGIN, CREATEDB, a
//! password made up per process, stored as SCRAM) must give its password over TCP; `diag_tls`
//! (LOGIN, CREATEDB) connects by trust over TLS only, and is refused in plain text:
//!
//! ```text
//! local     all all                  trust
//! hostssl   all diag_tls 127.0.0.1/32 trust
//! hostnossl all diag_tls 127.0.0.1/32 reject
//! host      all diag_pw  127.0.0.1/32 scram-sha-256
//! host      all all      127.0.0.1/32 trust
//! ```
//!
//! **Stopping it.** The test harness has no global teardown, so two mechanisms cover the two
//! ways a test process ends:
//! - it exits (all tests ran, or `process::exit` after a failure): an `atexit` handler sends the
//!   postmaster SIGINT (fast shutdown: backends are ended, a shutdown checkpoint, exit), waits for
//!   it (bounded, 30 s, then SIGKILL) and removes the temporary directory;
//! - it is killed (SIGKILL, a CI timeout, a crash): the postmaster was spawned with a
//!   parent-death signal (`PR_SET_PDEATHSIG`, SIGINT, set in the child after the uid change,
//!   which would clear it, and kept across `exec`), so the kernel stops it when its parent goes.
//!   That signal fires when the *thread* that spawned the child ends, not the process; test
//!   threads end after each test, so the postmaster is spawned from a dedicated thread that
//!   parks for the life of the process. The temporary directory of a killed process stays
//!   behind; the next server start in any test process removes such directories whose process
//!   and postmaster are gone ([`sweep_stale`]).
//!
//! Databases: [`PgServer::fresh_db`], [`PgServer::fresh_db_password`] and
//! [`PgServer::fresh_db_tls`] each create a new, empty database with a unique name (process id
//! and a counter), so parallel tests never share one.

use crate::OrFail;
use std::ffi::CString;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, Once, OnceLock, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use super::{bounded, free_port};

/// Where Debian's `postgresql-15` puts the server's programs.
pub const BIN_DIR: &str = "/usr/lib/postgresql/15/bin";

/// The trust-authenticated superuser.
const SUPERUSER: &str = "diag";
/// The password-authenticated role.
const PASSWORD_ROLE: &str = "diag_pw";
/// The role admitted over TLS only.
const TLS_ROLE: &str = "diag_tls";
/// The programs the harness runs from [`BIN_DIR`].
const PROGRAMS: &[&str] = &["initdb", "postgres", "pg_isready"];
/// Prefix of the temporary directories, followed by the test process's id.
const DIR_PREFIX: &str = "diag-pg-";

/// The suite's one PostgreSQL 15 server (see the module documentation).
pub struct PgServer {
    port: u16,
    /// The temporary directory: `data/` (the data directory), the log, the Unix socket.
    dir: PathBuf,
    password: String,
    next_db: AtomicU64,
}

/// The suite's one server, started on first use (OnceLock), for the life of the test process.
/// A server that cannot start fails every test that asks for it, each with the same message.
pub fn server() -> &'static PgServer {
    static SERVER: OnceLock<Result<PgServer, String>> = OnceLock::new();
    match SERVER.get_or_init(start) {
        Ok(server) => server,
        Err(message) => panic!("{message}"),
    }
}

impl PgServer {
    /// A fresh, empty database on the server (CREATE DATABASE with a unique name), as a URL
    /// `postgres://diag@127.0.0.1:PORT/NAME` for the trust-authenticated superuser `diag`.
    pub fn fresh_db(&self) -> String {
        self.create_db(SUPERUSER)
    }

    /// Same, but the URL names the password-authenticated role `diag_pw` (scram-sha-256) with
    /// no password in it: `postgres://diag_pw@127.0.0.1:PORT/NAME`; the role owns the db.
    pub fn fresh_db_password(&self) -> String {
        self.create_db(PASSWORD_ROLE)
    }

    /// That role's password (for PGPASSWORD in tests).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// Same, but the URL names the role `diag_tls`, which the server admits over TLS only (by
    /// trust) and refuses in plain text: `postgres://diag_tls@127.0.0.1:PORT/NAME`; the role
    /// owns the db. Its certificate verifies against [`PgServer::ca_file`].
    pub fn fresh_db_tls(&self) -> String {
        self.create_db(TLS_ROLE)
    }

    /// The PEM certificate of the throwaway CA that signed the server's certificate (for
    /// `PGSSLROOTCERT`); the server's certificate names `127.0.0.1` and `localhost`.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("tls").join("ca.crt")
    }

    /// Runs SQL through psql as `diag` against database url, panicking with psql's stderr on
    /// failure; returns stdout (psql -XAtq -v ON_ERROR_STOP=1). The SQL is a script on psql's
    /// stdin, so each statement runs on its own (CREATE DATABASE included); whatever user
    /// `url` names, psql connects as `diag`.
    #[track_caller]
    pub fn psql(&self, url: &str, sql: &str) -> String {
        let url = as_superuser(url);
        let mut cmd = psql_command(&url);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let what = format!("psql {url}");
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("`{what}` cannot start: {e}"));
        // Written from a thread: psql may answer before it has read everything.
        let mut stdin = child.stdin.take().or_fail("psql's stdin");
        let script = sql.to_string();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(script.as_bytes());
        });
        let out = bounded::wait_with_output(child, bounded::LIMIT, &what);
        let _ = writer.join();
        assert!(
            out.status.success(),
            "`{what}` failed ({}):\n{}\nSQL:\n{sql}\nserver log: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.log().display()
        );
        String::from_utf8(out.stdout).or_fail("psql's output is UTF-8")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log file, beside its data directory (`data/`) in the temporary directory
    /// (for failure messages).
    pub fn log(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    fn url(&self, user: &str, db: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/{db}", self.port)
    }

    #[track_caller]
    fn create_db(&self, owner: &str) -> String {
        let n = self.next_db.fetch_add(1, Ordering::Relaxed);
        let name = format!("diag_{}_{n}", std::process::id());
        self.psql(
            &self.url(SUPERUSER, "postgres"),
            &format!("CREATE DATABASE {name} OWNER {owner};"),
        );
        self.url(owner, &name)
    }
}

/// psql, as a client: the one of [`BIN_DIR`] (the server's version), else `psql` on PATH.
pub fn psql_program() -> PathBuf {
    let bundled = Path::new(BIN_DIR).join("psql");
    if bundled.is_file() {
        bundled
    } else {
        PathBuf::from("psql")
    }
}

/// `psql -XAtq -v ON_ERROR_STOP=1 -w -d URL`: no psqlrc, unaligned tuples only, stop at the
/// first error, never prompt for a password; messages in English, no connection settings
/// from the environment beyond what the caller adds.
pub fn psql_command(url: &str) -> Command {
    let mut cmd = Command::new(psql_program());
    cmd.args(["-XAtq", "-v", "ON_ERROR_STOP=1", "-w", "-d", url])
        .env("LC_ALL", "C")
        .env("PGCONNECT_TIMEOUT", "10");
    for var in [
        "PGPASSWORD",
        "PGSERVICE",
        "PGOPTIONS",
        "PGSSLMODE",
        "PGDATABASE",
        "PGUSER",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Whether the server's programs are in `bin_dir`; the error names each missing one and the
/// command that installs them.
pub fn check_installation(bin_dir: &Path) -> Result<(), String> {
    let missing: Vec<String> = PROGRAMS
        .iter()
        .map(|p| bin_dir.join(p))
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "PostgreSQL 15 is not installed ({} missing): run scripts/install-peers, which \
             installs the Debian package postgresql-15",
            missing.join(", ")
        ))
    }
}

/// `url` with `diag` as its user (and no password): `scheme://[user[:pw]@]host/path`.
fn as_superuser(url: &str) -> String {
    let (scheme, rest) = url
        .split_once("://")
        .unwrap_or_else(|| panic!("not a postgres:// URL: {url}"));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    format!("{scheme}://{SUPERUSER}@{host}/{path}")
}

/// What the `atexit` handler stops and removes: the postmaster's pid once spawned, the
/// temporary directory once created.
struct Started {
    postmaster: Option<libc::pid_t>,
    dir: Option<PathBuf>,
}

static STARTED: Mutex<Started> = Mutex::new(Started {
    postmaster: None,
    dir: None,
});

fn started() -> std::sync::MutexGuard<'static, Started> {
    STARTED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts the server; any failure (a panic included) becomes the message every test gets,
/// after what was started is stopped and removed.
fn start() -> Result<PgServer, String> {
    static AT_EXIT: Once = Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: registers a plain function that never unwinds.
        let rc = unsafe { libc::atexit(stop_at_exit) };
        assert_eq!(rc, 0, "atexit");
    });
    let result = std::panic::catch_unwind(start_server).unwrap_or_else(|panic| {
        Err(panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "the PostgreSQL server did not start".to_string()))
    });
    if result.is_err() {
        stop_and_remove();
    }
    result
}

fn start_server() -> Result<PgServer, String> {
    check_installation(Path::new(BIN_DIR))?;
    let run_as = server_user()?;
    let tmp = std::env::temp_dir();
    sweep_stale(&tmp);

    if run_as.is_some() {
        // The `postgres` user must reach its directory: every folder above it searchable by others.
        if let Some(closed) = tmp
            .ancestors()
            .find(|a| std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 == 0))
        {
            return Err(format!(
                "the PostgreSQL server runs as the `postgres` user, who cannot enter {}: set \
                 TMPDIR to a directory it can reach, such as /tmp",
                closed.display()
            ));
        }
    }
    let dir = tmp.join(format!("{DIR_PREFIX}{}", std::process::id()));
    // A directory of an earlier process with this pid.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    started().dir = Some(dir.clone());
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
    if let Some((uid, gid)) = run_as {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
            .map_err(|e| format!("chown postgres {}: {e}", dir.display()))?;
    }
    let data = dir.join("data");
    let bin = Path::new(BIN_DIR);

    let mut initdb = Command::new(bin.join("initdb"));
    initdb
        .arg("-D")
        .arg(&data)
        .args(["-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C"])
        .args(["--no-sync", "--no-instructions"])
        .env("LC_ALL", "C")
        .current_dir(&dir)
        .stdin(Stdio::null());
    as_server_user(&mut initdb, run_as);
    let out = bounded::output(&mut initdb, Duration::from_secs(120));
    if !out.status.success() {
        return Err(format!(
            "initdb failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // Rewritten in place: the file keeps initdb's owner and mode.
    let hba = format!(
        "# diag's test server (crates/diag-testkit/src/postgres.rs)\n\
         local all all trust\n\
         hostssl all {TLS_ROLE} 127.0.0.1/32 trust\n\
         hostnossl all {TLS_ROLE} 127.0.0.1/32 reject\n\
         host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n\
         host all all 127.0.0.1/32 trust\n"
    );
    let tls = make_certificates(&dir, run_as)?;
    std::fs::write(data.join("pg_hba.conf"), hba).map_err(|e| format!("pg_hba.conf: {e}"))?;

    let port = free_port();
    let log_path = dir.join("postgres.log");
    let log = std::fs::File::create(&log_path).map_err(|e| format!("server log: {e}"))?;
    let mut postgres = Command::new(bin.join("postgres"));
    postgres
        .arg("-D")
        .arg(&data)
        .args(["-p", &port.to_string()])
        .args(["-c", "listen_addresses=127.0.0.1"])
        .arg("-c")
        .arg(format!("unix_socket_directories={}", dir.display()))
        .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
        .args(["-c", "full_page_writes=off", "-c", "max_connections=200"])
        .args([
            "-c",
            "shared_buffers=32MB",
            "-c",
            "log_connections=on",
            "-c",
            "ssl=on",
        ])
        .arg("-c")
        .arg(format!("ssl_cert_file={}", tls.cert.display()))
        .arg("-c")
        .arg(format!("ssl_key_file={}", tls.key.display()))
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| format!("server log: {e}"))?)
        .stderr(log);
    as_server_user(&mut postgres, run_as);
    let pid = spawn_postmaster(postgres)?;
    started().postmaster = Some(pid);
    wait_ready(pid, port, &log_path)?;

    let server = PgServer {
        port,
        dir,
        password: made_up_password(),
        next_db: AtomicU64::new(0),
    };
    server.psql(
        &server.url(SUPERUSER, "postgres"),
        &format!(
            "CREATE ROLE {PASSWORD_ROLE} LOGIN CREATEDB PASSWORD '{}';\n\
             CREATE ROLE {TLS_ROLE} LOGIN CREATEDB;",
            server.password
        ),
    );
    Ok(server)
}

/// The server's certificate and key, in `<dir>/tls/`.
struct ServerTls {
    cert: PathBuf,
    key: PathBuf,
}

/// The `openssl` configuration the certificates are made from: a CA that may sign
/// certificates only, and a server certificate for the loopback address and name (rustls
/// reads the subject alternative names, never the common name).
const OPENSSL_CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = diag test server CA
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// Makes the throwaway CA and the server's certificate (see the module documentation) with the
/// `openssl` command line; the CA's key is removed once it has signed. As root, the files are
/// given to the server's user, who must own its key (mode 0600).
fn make_certificates(dir: &Path, run_as: Option<(u32, u32)>) -> Result<ServerTls, String> {
    let tls = dir.join("tls");
    std::fs::create_dir(&tls).map_err(|e| format!("cannot create {}: {e}", tls.display()))?;
    std::fs::write(tls.join("openssl.cnf"), OPENSSL_CONFIG)
        .map_err(|e| format!("openssl.cnf: {e}"))?;
    let key_pair = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let steps: Vec<Vec<&str>> = vec![
        [
            &[
                "req",
                "-x509",
                "-config",
                "openssl.cnf",
                "-extensions",
                "ca",
            ][..],
            &key_pair,
            &["-keyout", "ca.key", "-out", "ca.crt", "-days", "2"],
        ]
        .concat(),
        [
            &[
                "req",
                "-new",
                "-config",
                "openssl.cnf",
                "-subj",
                "/CN=localhost",
            ][..],
            &key_pair,
            &["-keyout", "server.key", "-out", "server.csr"],
        ]
        .concat(),
        vec![
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            "openssl.cnf",
            "-extensions",
            "server",
            "-days",
            "2",
            "-out",
            "server.crt",
        ],
    ];
    for args in &steps {
        let mut openssl = Command::new("openssl");
        openssl
            .args(args)
            .current_dir(&tls)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = openssl.spawn().map_err(|e| {
            format!(
                "cannot run `openssl` to make the test server's TLS certificate ({e}): run \
                 scripts/install-peers (Debian's PostgreSQL packages bring it)"
            )
        })?;
        let out = bounded::wait_with_output(child, bounded::LIMIT, "openssl");
        if !out.status.success() {
            return Err(format!(
                "`openssl {}` failed ({}):\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    for gone in ["ca.key", "ca.srl", "server.csr"] {
        let _ = std::fs::remove_file(tls.join(gone));
    }
    if tls.join("ca.key").exists() {
        return Err(format!("cannot remove {}", tls.join("ca.key").display()));
    }
    let key = tls.join("server.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("chmod {}: {e}", key.display()))?;
    if let Some((uid, gid)) = run_as {
        for file in [tls.as_path(), &key, &tls.join("server.crt")] {
            std::os::unix::fs::chown(file, Some(uid), Some(gid))
                .map_err(|e| format!("chown postgres {}: {e}", file.display()))?;
        }
    }
    Ok(ServerTls {
        cert: tls.join("server.crt"),
        key,
    })
}

/// The `postgres` user's uid and gid when this process runs as root (PostgreSQL refuses
/// root); `None` otherwise.
fn server_user() -> Result<Option<(u32, u32)>, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = CString::new("postgres").or_fail("a C string");
    // SAFETY: a zeroed passwd is a valid out-parameter; getpwnam_r writes its strings into
    // `buf`, which outlives the call, and we read only the integers.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        let rc = libc::getpwnam_r(
            name.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        );
        if rc != 0 || found.is_null() {
            return Err(
                "the tests run as root, which PostgreSQL refuses, and there is no \
                        `postgres` user to run it as: run scripts/install-peers (the Debian \
                        package postgresql-15 creates the user)"
                    .to_string(),
            );
        }
        Ok(Some((pwd.pw_uid, pwd.pw_gid)))
    }
}

fn as_server_user(cmd: &mut Command, run_as: Option<(u32, u32)>) {
    if let Some((uid, gid)) = run_as {
        cmd.uid(uid).gid(gid);
    }
}

/// Spawns the postmaster from a thread that lives as long as the process, with SIGINT as its
/// parent-death signal (see the module documentation); returns its pid.
fn spawn_postmaster(mut cmd: Command) -> Result<libc::pid_t, String> {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe calls.
    // std runs it after setgid/setuid, which would otherwise clear the signal.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGINT as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have ended before the signal was set: then none would come.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("the test process ended"));
            }
            Ok(())
        });
    }
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("postgres-parent".into())
        .spawn(move || {
            let spawned = cmd.spawn().map(|child| child.id() as libc::pid_t);
            let _ = tx.send(spawned);
            // The postmaster's parent-death signal is tied to this thread: it must never end.
            loop {
                std::thread::park();
            }
        })
        .map_err(|e| format!("cannot start the thread that spawns postgres: {e}"))?;
    rx.recv()
        .map_err(|_| "the thread that spawns postgres ended".to_string())?
        .map_err(|e| format!("cannot start {BIN_DIR}/postgres: {e}"))
}

/// Polls `pg_isready` until the server accepts connections, failing if the postmaster exits
/// first or after 60 s.
fn wait_ready(pid: libc::pid_t, port: u16, log: &Path) -> Result<(), String> {
    let limit = Duration::from_secs(60);
    let deadline = Instant::now() + limit;
    let log_text = || std::fs::read_to_string(log).unwrap_or_default();
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child, with a valid out-parameter.
        let reaped = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if reaped == pid || reaped == -1 {
            return Err(format!(
                "postgres exited (wait status {status}) before it accepted connections; its log \
                 ({}):\n{}",
                log.display(),
                log_text()
            ));
        }
        let mut probe = Command::new(Path::new(BIN_DIR).join("pg_isready"));
        probe
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-U", SUPERUSER, "-d", "postgres", "-t", "5", "-q"])
            .stdin(Stdio::null());
        if bounded::output(&mut probe, bounded::LIMIT).status.success() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "postgres did not accept connections on 127.0.0.1:{port} within {limit:?}; its \
                 log ({}):\n{}",
                log.display(),
                log_text()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A password nobody guesses: two hashes from std's randomly seeded hasher.
fn made_up_password() -> String {
    use std::hash::BuildHasher;
    let word = || std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    format!("pw{:016x}{:016x}", word(), word())
}

extern "C" fn stop_at_exit() {
    stop_and_remove();
}

/// Fast shutdown of the postmaster (SIGINT; SIGKILL after 30 s), then the temporary directory
/// goes. Never blocks on the lock: a process exiting while another thread starts the server
/// leaves the postmaster to its parent-death signal.
fn stop_and_remove() {
    let mut state = match STARTED.try_lock() {
        Ok(state) => state,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return,
    };
    if let Some(pid) = state.postmaster.take() {
        // SAFETY: signals and waits for our own child.
        unsafe {
            if libc::kill(pid, libc::SIGINT) == 0 && !reaped_within(pid, Duration::from_secs(30)) {
                libc::kill(pid, libc::SIGKILL);
                reaped_within(pid, Duration::from_secs(5));
            }
        }
    }
    if let Some(dir) = state.dir.take() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Whether our child `pid` ended (and was reaped, or was already) within `limit`.
fn reaped_within(pid: libc::pid_t, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out-parameter.
        let reaped = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if reaped == pid || reaped == -1 {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Removes the temporary directories (`diag-pg-<pid>` in `tmp`) of test processes that were
/// killed: the process is gone, and so is the postmaster its `postmaster.pid` names.
pub fn sweep_stale(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    let own = std::process::id() as libc::pid_t;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|p| p.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if pid == own || is_running(pid) {
            continue;
        }
        let postmaster = std::fs::read_to_string(entry.path().join("data/postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<libc::pid_t>().ok());
        if postmaster.is_some_and(is_running) {
            continue;
        }
        let _ = std::fs::remove_dir_all(entry.path());
    }
}

/// Whether process `pid` exists and is not a zombie (a killed process's postmaster, once
/// ended, may wait as a zombie for a parent that does not reap).
pub fn is_running(pid: libc::pid_t) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(") ")
                    .map(|(_, rest)| !rest.starts_with('Z'))
            })
            .unwrap_or(true)
}
