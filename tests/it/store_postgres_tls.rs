//! The PostgreSQL run store over TLS, through the `diag` binary, against the suite's server
//! (`diag_testkit::postgres`), which serves TLS with a certificate of a throwaway CA and admits the
//! role `diag_tls` over TLS only (`hostssl … trust`, `hostnossl … reject`).
//!
//! - With `PGSSLROOTCERT` naming that CA, the default `sslmode` (prefer) and `require` both
//!   store the run over TLS, and the read commands read it back; `disable` is refused by the
//!   server, in one `diag:` line naming the store.
//! - Without it the certificate is not trusted: `require` fails naming the certificate and
//!   `PGSSLROOTCERT`; `prefer` tries once more in plain text, as libpq does, which a role the
//!   server admits over TLS only cannot use (the line names the certificate too), and a role
//!   it admits in plain text can.
//! - A `PGSSLROOTCERT` that cannot be read is one line; it is not read when `sslmode=disable`.
//! - `require` against a server that offers no TLS (a listener of the test's own that answers
//!   PostgreSQL's TLS request with `N`) is one line.
//!
//! The server logs each connection it authorizes (`log_connections=on`) with `SSL enabled`
//! when TLS carried it, before the client hears that it is in: the log, read after `diag`
//! exited, tells which connections used TLS.

use crate::support::cli_env::{Out, TestEnv};
use diag_testkit::postgres::{self, PgServer};

const PASS: &str = "tests/fixtures/runs/pass.json";

/// `url` with `?sslmode=MODE`.
fn with_mode(url: &str, mode: &str) -> String {
    format!("{url}?sslmode={mode}")
}

/// The database a URL of the harness names.
fn db_name(url: &str) -> &str {
    url.rsplit('/').next().unwrap()
}

/// The `user@127.0.0.1:PORT/DB` every message names for a URL of the harness.
fn target(url: &str) -> &str {
    url.strip_prefix("postgres://").unwrap()
}

/// `diag --db URL ARGS`, with `PGSSLROOTCERT` set to `root_cert` when given.
fn diag(env: &TestEnv, url: &str, root_cert: Option<&str>, args: &[&str]) -> Out {
    let mut all = vec!["--db", url];
    all.extend_from_slice(args);
    env.run_with(&all, |c| {
        if let Some(file) = root_cert {
            c.env("PGSSLROOTCERT", file);
        }
    })
}

fn ask(env: &TestEnv, url: &str, root_cert: Option<&str>) -> Out {
    diag(env, url, root_cert, &["ask", "--fixture", "pass.json"])
}

/// The runs stored in the database of `url` (read as the superuser, over the socket).
fn stored_runs(server: &PgServer, url: &str) -> usize {
    let tables = server.psql(
        url,
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'diagnosis_run'",
    );
    if tables.trim() == "0" {
        return 0;
    }
    server
        .psql(url, "SELECT count(*) FROM diagnosis_run")
        .trim()
        .parse()
        .unwrap()
}

/// The server log's `connection authorized` lines of `diag` (its `application_name`; psql's
/// differs) as `user` on the database of `url`.
fn authorized(server: &PgServer, user: &str, url: &str) -> Vec<String> {
    let needle = format!(
        "connection authorized: user={user} database={} application_name=diag",
        db_name(url)
    );
    std::fs::read_to_string(server.log())
        .unwrap()
        .lines()
        .filter(|l| l.contains(&needle))
        .map(str::to_string)
        .collect()
}

#[track_caller]
fn refused(out: &Out) -> String {
    out.expect(2);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    out.one_error_line().to_string()
}

#[test]
fn a_tls_only_role_stores_and_reads_runs_over_verified_tls_and_is_refused_in_plain_text() {
    let server = postgres::server();
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let url = server.fresh_db_tls();
    let ca = server.ca_file();
    let ca = Some(ca.to_str().unwrap());

    // The default sslmode (prefer) and require both reach the server over TLS.
    ask(&env, &url, ca).expect(0);
    assert_eq!(stored_runs(server, &url), 1);
    ask(&env, &with_mode(&url, "require"), ca).expect(0);
    assert_eq!(stored_runs(server, &url), 2);
    let listed = diag(&env, &url, ca, &["runs", "--json"]);
    listed.expect(0).quiet_stderr();
    let runs = listed.json()["runs"].as_array().unwrap().clone();
    assert_eq!(runs.len(), 2, "{}", listed.stdout);
    let run = runs[0]["run_id"].as_str().unwrap();
    diag(&env, &url, ca, &["trace", run, "--json"])
        .expect(0)
        .quiet_stderr();
    diag(&env, &with_mode(&url, "require"), ca, &["export", run])
        .expect(0)
        .quiet_stderr();
    let connections = authorized(server, "diag_tls", &url);
    assert_eq!(connections.len(), 5, "{connections:#?}");
    assert!(
        connections.iter().all(|l| l.contains(" SSL enabled (")),
        "every connection used TLS: {connections:#?}"
    );

    // In plain text the server refuses the role: one line, naming the store and the cause.
    let line = refused(&ask(&env, &with_mode(&url, "disable"), ca));
    assert!(
        line.starts_with(&format!(
            "diag: the PostgreSQL server at {} accepts user diag_tls over TLS only: ",
            target(&url)
        )) && line.contains("no encryption")
            && line.ends_with("(drop sslmode=disable from the URL)"),
        "{line}"
    );
    assert_eq!(stored_runs(server, &url), 2, "nothing written");
    assert_eq!(authorized(server, "diag_tls", &url).len(), 5);
}

#[test]
fn an_untrusted_certificate_is_named_and_nothing_is_stored() {
    let server = postgres::server();
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let untrusted = "the server's TLS certificate is not trusted (invalid peer certificate: \
                     UnknownIssuer); set PGSSLROOTCERT to the PEM file of the CA that signed it";

    // require: no TLS, no connection.
    let url = server.fresh_db_tls();
    let line = refused(&ask(&env, &with_mode(&url, "require"), None));
    assert_eq!(
        line,
        format!(
            "diag: cannot connect to the PostgreSQL run store at {} over TLS: {untrusted}",
            target(&url)
        )
    );
    // prefer: once more in plain text, which the server refuses this role; the line says
    // both.
    let line = refused(&ask(&env, &url, None));
    assert!(
        line.starts_with(&format!(
            "diag: cannot connect to the PostgreSQL run store at {} over TLS: {untrusted}; \
             without TLS (sslmode=prefer), the server refused: pg_hba.conf rejects connection",
            target(&url)
        )) && line.ends_with("no encryption"),
        "{line}"
    );
    assert_eq!(stored_runs(server, &url), 0);
    assert!(authorized(server, "diag_tls", &url).is_empty());

    // A role the server admits in plain text: require still refuses the certificate, and
    // prefer goes on without TLS, saying so in the log only.
    let plain = server.fresh_db();
    let line = refused(&ask(&env, &with_mode(&plain, "require"), None));
    assert!(line.ends_with(untrusted), "{line}");
    assert_eq!(stored_runs(server, &plain), 0);
    ask(&env, &plain, None).expect(0).quiet_stderr();
    let logged = env.run_with(&["--db", &plain, "runs"], |c| {
        c.env("DIAG_LOG", "warn");
    });
    logged.expect(0);
    assert!(
        logged
            .stderr
            .contains("TLS handshake failed; sslmode=prefer connects without TLS")
            && logged.stderr.contains("is not trusted"),
        "{}",
        logged.stderr
    );
    assert_eq!(stored_runs(server, &plain), 1);
    let connections = authorized(server, "diag", &plain);
    assert_eq!(connections.len(), 2, "{connections:#?}");
    assert!(
        connections.iter().all(|l| !l.contains("SSL enabled")),
        "{connections:#?}"
    );
    // With the CA, the same URL uses TLS.
    ask(&env, &plain, Some(server.ca_file().to_str().unwrap())).expect(0);
    let connections = authorized(server, "diag", &plain);
    assert_eq!(connections.len(), 3, "{connections:#?}");
    assert!(
        connections[2].contains(" SSL enabled ("),
        "{connections:#?}"
    );
}

#[test]
fn a_pgsslrootcert_diag_cannot_use_is_one_line_and_nothing_is_stored() {
    let server = postgres::server();
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let url = server.fresh_db_tls();

    let missing = env.path("no/such/ca.pem");
    let missing = missing.to_str().unwrap();
    for url in [url.clone(), with_mode(&url, "require")] {
        let line = refused(&ask(&env, &url, Some(missing)));
        assert!(
            line.starts_with(&format!(
                "diag: cannot use the CA certificates of PGSSLROOTCERT: {missing}: "
            )) && line.contains("No such file or directory"),
            "{line}"
        );
    }
    // A file that holds no certificate (a JSON file, say).
    let not_pem = env.path("pass.json");
    let line = refused(&ask(&env, &url, Some(not_pem.to_str().unwrap())));
    assert_eq!(
        line,
        format!(
            "diag: cannot use the CA certificates of PGSSLROOTCERT: {} holds no PEM certificate \
             (-----BEGIN CERTIFICATE-----)",
            not_pem.display()
        )
    );
    assert_eq!(stored_runs(server, &url), 0);
    assert!(authorized(server, "diag_tls", &url).is_empty());

    // Without TLS no certificate is read.
    let plain = server.fresh_db();
    ask(&env, &with_mode(&plain, "disable"), Some(missing))
        .expect(0)
        .quiet_stderr();
    assert_eq!(stored_runs(server, &plain), 1);
}

#[test]
fn require_against_a_server_without_tls_is_one_line() {
    use std::io::{Read, Write};
    let env = TestEnv::new();
    env.copy_fixture(PASS, "pass.json");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Answers the SSLRequest (length 8, code 80877103) with `N`, then waits for the client to
    // go.
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut request = [0u8; 8];
        conn.read_exact(&mut request).unwrap();
        conn.write_all(b"N").unwrap();
        let mut rest = Vec::new();
        let _ = conn.read_to_end(&mut rest);
        request
    });
    let url = format!("postgres://diag@127.0.0.1:{port}/runs?sslmode=require");
    let line = refused(&ask(&env, &url, None));
    assert_eq!(
        line,
        format!(
            "diag: cannot connect to the PostgreSQL run store at diag@127.0.0.1:{port}/runs over \
             TLS: the server does not offer TLS, and the URL's sslmode=require asks for it"
        )
    );
    assert_eq!(server.join().unwrap(), [0, 0, 0, 8, 4, 210, 22, 47]);
}
