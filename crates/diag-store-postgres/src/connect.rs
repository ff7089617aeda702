//! From a URL to a live connection: the URL is parsed by the driver, the password is found
//! where libpq's users keep it, TLS is negotiated as the URL's `sslmode` asks, and every
//! failure becomes one [`PgError`] line that names the server and never the password.
//!
//! - **Password**, first found wins: the URL's own, then `PGPASSWORD`, then the variable
//!   [`super::PgOptions::password_env`] names (`[store] password_env`), then the password
//!   file (`PGPASSFILE`, else `~/.pgpass`; lines `host:port:database:user:password`, `*`
//!   matches anything, `\:` and `\\` escape). diag keeps it in memory only: it is never stored,
//!   logged, exported or printed.
//! - **TLS**: `sslmode=disable` never, `prefer` (the default) when the server offers it,
//!   `require` always. The server's certificate is always verified, against the webpki roots
//!   and the PEM certificates in `PGSSLROOTCERT` (read only when TLS may be used): a TLS
//!   connection to an unverified server is never made. With `prefer`, a handshake that fails
//!   (a certificate diag does not trust, most often) is followed, as libpq does, by one attempt
//!   without TLS, logged as a warning; a server that then refuses plain text is reported with
//!   the certificate's problem. `require` never falls back: it is the mode that guarantees TLS.
//! - **Time**: a server that does not answer fails the connection after `connect_timeout`
//!   (URL parameter, default 10 s) instead of hanging the command.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::Config;

use super::error::{code, one_line, PgError};
use super::PgOptions;
use diag_records::env_vars::EnvVars;

pub use diag_store::{is_postgres_url, POSTGRES_SCHEMES as SCHEMES};

/// A parsed URL and the name of the store it gives for messages.
pub(crate) struct Target {
    pub config: Config,
    /// `user@host:port/database`, with no password.
    pub name: String,
    pub user: String,
}

pub(crate) fn parse(url: &str, options: &PgOptions) -> Result<Target, PgError> {
    if !is_postgres_url(url) {
        return Err(PgError::Url(
            "it must start with postgres:// or postgresql://".into(),
        ));
    }
    check_sslmode(url)?;
    // The driver's messages about a malformed URL do not quote it; its cause names the option
    // at fault (`invalid value for option `port``), never a value.
    let mut config = Config::from_str(url).map_err(|e| PgError::Url(driver_error(&e)))?;
    let user = config
        .get_user()
        .map(str::to_string)
        .or_else(|| {
            std::env::var(EnvVars::PGUSER)
                .ok()
                .filter(|u| !u.is_empty())
        })
        .or_else(|| std::env::var(EnvVars::USER).ok().filter(|u| !u.is_empty()))
        .ok_or_else(|| PgError::Url("it names no user (postgres://USER@HOST/DATABASE)".into()))?;
    config.user(&user);
    if config.get_hosts().is_empty() {
        config.host("localhost");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    config.application_name("diag");
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let database = config.get_dbname().unwrap_or(&user).to_string();
    if config.get_password().is_none() {
        if let Some(password) = password(&host, port, &database, &user, options) {
            config.password(password);
        }
    }
    Ok(Target {
        name: format!("{user}@{host}:{port}/{database}"),
        config,
        user,
    })
}

fn password(
    host: &str,
    port: u16,
    database: &str,
    user: &str,
    options: &PgOptions,
) -> Option<String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    var(EnvVars::PGPASSWORD)
        .or_else(|| options.password_env.as_deref().and_then(var))
        .or_else(|| {
            let file = var(EnvVars::PGPASSFILE)
                .map(PathBuf::from)
                .or_else(|| var(EnvVars::HOME).map(|h| PathBuf::from(h).join(".pgpass")))?;
            let text = std::fs::read_to_string(file).ok()?;
            pgpass_lookup(&text, host, port, database, user)
        })
}

/// The password of the first line of a password file that matches.
pub(crate) fn pgpass_lookup(
    text: &str,
    host: &str,
    port: u16,
    database: &str,
    user: &str,
) -> Option<String> {
    let port = port.to_string();
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .find_map(|line| {
            let fields = pgpass_fields(line);
            let [h, p, d, u, password] = <[String; 5]>::try_from(fields).ok()?;
            let matches = |pattern: &str, value: &str| pattern == "*" || pattern == value;
            let host_matches = matches(&h, host) || (h == "localhost" && host == "127.0.0.1");
            (host_matches && matches(&p, &port) && matches(&d, database) && matches(&u, user))
                .then_some(password)
        })
}

fn pgpass_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(last)) = (chars.next(), fields.last_mut()) {
                    last.push(next);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(last) = fields.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    fields
}

/// The TLS connector: rustls with ring, verifying against the webpki roots and
/// `PGSSLROOTCERT` (not read when `mode` is `disable`: no certificate is ever checked then).
pub(crate) fn tls(mode: SslMode) -> Result<tokio_postgres_rustls::MakeRustlsConnect, PgError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let root_file = std::env::var_os(EnvVars::PGSSLROOTCERT).filter(|v| !v.is_empty());
    if let Some(file) = root_file.filter(|_| mode != SslMode::Disable) {
        let shown = PathBuf::from(&file).display().to_string();
        let certs = CertificateDer::pem_file_iter(&file)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| PgError::RootCert(format!("{shown}: {}", pem_error(&e))))?;
        if certs.is_empty() {
            return Err(PgError::RootCert(format!(
                "{shown} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
            )));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| {
                PgError::RootCert(format!("{shown} holds a certificate diag cannot use: {e}"))
            })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PgError::Url(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// A PEM file's error, without the wrapping that repeats it.
fn pem_error(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        other => format!("not a PEM file ({other:?})"),
    }
}

/// The rustls error a failed connection carries, when it failed in the TLS handshake.
pub(crate) fn tls_failure(e: &tokio_postgres::Error) -> Option<&rustls::Error> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(tls) = s.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        // tokio-rustls hands the rustls error over inside an io::Error, whose `source` skips
        // it.
        if let Some(tls) = s
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(tls);
        }
        source = s.source();
    }
    None
}

/// A failed TLS handshake, as an operator reads it: what is wrong with the server's
/// certificate and what to do about it.
pub(crate) fn tls_problem(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    let fix = "set PGSSLROOTCERT to the PEM file of the CA that signed it";
    let rustls::Error::InvalidCertificate(cert) = e else {
        return format!("the TLS handshake failed ({e})");
    };
    match cert {
        C::UnknownIssuer | C::BadSignature => {
            format!("the server's TLS certificate is not trusted ({e}); {fix}")
        }
        C::NotValidForName | C::NotValidForNameContext { .. } => format!(
            "the server's TLS certificate is not for the host the URL names ({e}); connect by a \
             name or address the certificate lists"
        ),
        C::Expired | C::ExpiredContext { .. } => {
            format!("the server's TLS certificate has expired ({e})")
        }
        C::NotValidYet | C::NotValidYetContext { .. } => {
            format!("the server's TLS certificate is not valid yet ({e})")
        }
        _ => format!("the server's TLS certificate is refused ({e})"),
    }
}

/// Maps the failure of a `sslmode=prefer` connection whose TLS handshake failed (`tls`) and
/// whose attempt without TLS failed too (`plain`): a server that refuses plain text is
/// reported with the certificate's problem, any other refusal as itself.
pub(crate) fn fallback_error(
    target: &Target,
    tls: &rustls::Error,
    plain: &tokio_postgres::Error,
) -> PgError {
    match plain.as_db_error() {
        Some(db) if db.code().code() == code::INVALID_AUTHORIZATION => PgError::Tls {
            target: target.name.clone(),
            detail: format!(
                "{}; without TLS (sslmode=prefer), the server refused: {}",
                tls_problem(tls),
                db.message()
            ),
        },
        _ => connect_error(target, plain),
    }
}

/// Maps a failed connection to the line an operator acts on.
pub(crate) fn connect_error(target: &Target, e: &tokio_postgres::Error) -> PgError {
    let name = target.name.clone();
    if let Some(tls) = tls_failure(e) {
        return PgError::Tls {
            target: name,
            detail: tls_problem(tls),
        };
    }
    if let Some(db) = e.as_db_error() {
        let detail = db.message().to_string();
        // `pg_hba.conf rejects connection …, no encryption`: the server takes this user over
        // TLS only.
        if db.code().code() == code::INVALID_AUTHORIZATION && detail.ends_with("no encryption") {
            return PgError::TlsRequired {
                target: name,
                user: target.user.clone(),
                detail,
            };
        }
        return match db.code().code() {
            code::INVALID_PASSWORD | code::INVALID_AUTHORIZATION => PgError::Credentials {
                target: name,
                user: target.user.clone(),
                detail,
            },
            code::INVALID_CATALOG_NAME => PgError::Missing {
                target: name,
                detail,
            },
            _ => PgError::Unreachable {
                target: name,
                detail,
            },
        };
    }
    let text = error_chain(e);
    if text.contains("server does not support TLS") {
        return PgError::Tls {
            target: name,
            detail: "the server does not offer TLS, and the URL's sslmode=require asks for it"
                .into(),
        };
    }
    if text.contains("password missing") {
        return PgError::Credentials {
            target: name,
            user: target.user.clone(),
            detail: "the server asks for a password and none was given".into(),
        };
    }
    PgError::Unreachable {
        target: name,
        detail: text,
    }
}

/// The error with its causes, on one line (`connection refused` is the cause of `error
/// connecting to server`).
fn error_chain(e: &tokio_postgres::Error) -> String {
    let mut text = one_line(&e.to_string());
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let line = one_line(&s.to_string());
        if !line.is_empty() && !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = s.source();
    }
    text
}

/// The driver's error with its cause on one line: `invalid connection string: unknown option
/// `sslmod``.
fn driver_error(e: &tokio_postgres::Error) -> String {
    let text = one_line(&e.to_string());
    match std::error::Error::source(e) {
        Some(cause) => format!("{text}: {}", one_line(&cause.to_string())),
        None => text,
    }
}

/// The modes of `sslmode` diag takes.
const SSLMODES: [&str; 3] = ["disable", "prefer", "require"];

/// Refuses an `sslmode` diag does not take, naming it and the mode to use instead: libpq's
/// `verify-ca` and `verify-full` ask for what diag does in every TLS mode (it always verifies
/// the certificate and the host), so `require` is their equivalent; `allow` (TLS only when the
/// server insists) is not offered.
fn check_sslmode(url: &str) -> Result<(), PgError> {
    let Some((_, query)) = url.split_once('?') else {
        return Ok(());
    };
    let query = query.split('#').next().unwrap_or_default();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "sslmode" || SSLMODES.contains(&value) {
            continue;
        }
        let shown: String = if !value.is_empty()
            && value.len() <= 32
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            format!("sslmode={value}")
        } else {
            "its sslmode".to_string()
        };
        let what = match value {
            "verify-ca" | "verify-full" => format!(
                "{shown}: diag verifies the server's certificate and host in every TLS mode, so \
                 sslmode=require is the same check (trust a private CA with PGSSLROOTCERT)"
            ),
            "allow" => format!(
                "{shown} is not supported: use sslmode=prefer (TLS when offered) or \
                 sslmode=disable"
            ),
            _ => format!(
                "{shown} is not a mode diag knows: use sslmode=prefer (the default), \
                 sslmode=require or sslmode=disable"
            ),
        };
        return Err(PgError::Url(what));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_sslmode_diag_does_not_take_is_named_with_the_mode_to_use() {
        let options = PgOptions::default();
        let line = |url: &str| match parse(url, &options) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        };
        assert_eq!(
            line("postgres://diag@db/runs?sslmode=verify-full"),
            "the run store URL is not a PostgreSQL URL diag can use: sslmode=verify-full: diag \
             verifies the server's certificate and host in every TLS mode, so sslmode=require \
             is the same check (trust a private CA with PGSSLROOTCERT)"
        );
        assert!(
            line("postgres://diag@db/runs?connect_timeout=3&sslmode=verify-ca")
                .contains(": sslmode=verify-ca: diag verifies")
        );
        assert_eq!(
            line("postgres://diag@db/runs?sslmode=allow"),
            "the run store URL is not a PostgreSQL URL diag can use: sslmode=allow is not \
             supported: use sslmode=prefer (TLS when offered) or sslmode=disable"
        );
        assert_eq!(
            line("postgres://diag@db/runs?sslmode=bogus"),
            "the run store URL is not a PostgreSQL URL diag can use: sslmode=bogus is not a \
             mode diag knows: use sslmode=prefer (the default), sslmode=require or \
             sslmode=disable"
        );
        // A value that is not a word is not echoed.
        assert!(line("postgres://diag@db/runs?sslmode=%0a%1b").ends_with(
            "diag can use: its sslmode is not a mode diag knows: use sslmode=prefer \
                        (the default), sslmode=require or sslmode=disable"
        ));
        for good in SSLMODES {
            assert_eq!(line(&format!("postgres://diag@db/runs?sslmode={good}")), "");
        }
        // Other options the driver refuses are named by the driver's cause.
        assert_eq!(
            line("postgres://diag@db/runs?sslmod=require"),
            "the run store URL is not a PostgreSQL URL diag can use: invalid connection \
             string: unknown option `sslmod`"
        );
    }

    #[test]
    fn a_postgres_url_is_told_from_a_path() {
        assert!(is_postgres_url("postgres://diag@db/runs"));
        assert!(is_postgres_url("PostgreSQL://diag@db/runs"));
        assert!(!is_postgres_url("./postgres://x.db"));
        assert!(!is_postgres_url("mysql://db"));
        assert!(!is_postgres_url("postgres:"));
    }

    #[test]
    fn the_password_file_matches_by_field_with_wildcards_and_escapes() {
        let file = "# comment\n\
                    other:5432:*:diag:nope\n\
                    db.example:*:runs:diag:s\\:cret\\\\1\n\
                    *:*:*:*:fallback\n";
        assert_eq!(
            pgpass_lookup(file, "db.example", 5433, "runs", "diag").as_deref(),
            Some("s:cret\\1")
        );
        assert_eq!(
            pgpass_lookup(file, "db.example", 5433, "other", "diag").as_deref(),
            Some("fallback")
        );
        assert_eq!(pgpass_lookup("a:b:c\n", "a", 1, "c", "d"), None);
    }

    #[test]
    fn a_refused_certificate_says_what_is_wrong_and_what_to_do() {
        use rustls::CertificateError as C;
        let problem = |c: C| tls_problem(&rustls::Error::InvalidCertificate(c));
        assert_eq!(
            problem(C::UnknownIssuer),
            "the server's TLS certificate is not trusted (invalid peer certificate: \
             UnknownIssuer); set PGSSLROOTCERT to the PEM file of the CA that signed it"
        );
        assert!(problem(C::NotValidForName)
            .starts_with("the server's TLS certificate is not for the host"));
        assert!(problem(C::Expired).starts_with("the server's TLS certificate has expired"));
        assert!(problem(C::Revoked).starts_with("the server's TLS certificate is refused"));
        assert!(tls_problem(&rustls::Error::DecryptError).starts_with("the TLS handshake failed"));
    }

    #[test]
    fn a_parsed_url_names_its_store_without_the_password() {
        let options = PgOptions::default();
        let target = parse("postgres://diag:hunter2@10.0.0.5:6543/runs", &options).unwrap();
        assert_eq!(target.name, "diag@10.0.0.5:6543/runs");
        assert_eq!(target.config.get_password(), Some(&b"hunter2"[..]));
        let Err(e) = parse("postgres://diag:hunter2@10.0.0.5:notaport/runs", &options) else {
            panic!("a bad port parsed");
        };
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
