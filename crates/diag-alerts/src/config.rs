//! The configuration sections this crate owns: `[notify]` (where a diagnosis of an alert is
//! posted besides the store) and `[serve]` (how `diag serve` listens and how much it takes).
//! diag-ask's `Config` keeps them as written ([`diag_ask::config::Section`]); they are read
//! and checked here, with the file's own errors, and every default is one constant below,
//! which the configuration, `diag serve --help` and the documentation state
//! (`tests/it/defaults_doc.rs`).

use serde::Deserialize;

use diag_ask::config::{Config, ConfigError, Section};

/// `[serve] listen`: loopback unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";
/// `[serve] token_env`.
pub const DEFAULT_TOKEN_ENV: &str = "DIAG_SERVE_TOKEN";
/// The fewest bytes a webhook or read token may have unless `[serve] allow_short_token =
/// true` (as many as the link key: `openssl rand -hex 32` gives 64).
pub const MIN_TOKEN_BYTES: usize = 32;
/// `[serve] link_key_env`.
pub const DEFAULT_LINK_KEY_ENV: &str = "DIAG_SERVE_LINK_KEY";
/// `[serve] max_body_bytes`: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 1024 * 1024;
/// `[serve] max_requests_per_sec`.
pub const DEFAULT_MAX_REQUESTS_PER_SEC: u32 = 20;
/// `[serve] max_queue`.
pub const DEFAULT_MAX_QUEUE: u64 = 1000;
/// `[serve] concurrency`.
pub const DEFAULT_CONCURRENCY: u32 = 2;
/// `[serve] drain_secs`.
pub const DEFAULT_DRAIN_SECS: u64 = 30;
/// `[serve] lookback_secs`: the alert look-back of `diag_core::alert`, the same as
/// `diag investigate alertmanager --lookback`'s default.
pub const DEFAULT_LOOKBACK_SECS: u64 = diag_core::alert::DEFAULT_LOOKBACK.as_secs();
/// `[serve] report_link_ttl`.
pub const DEFAULT_REPORT_LINK_TTL: &str = "30d";
/// `[serve] header_read_timeout_secs`.
pub const DEFAULT_HEADER_READ_TIMEOUT_SECS: u64 = 10;
/// `[serve] body_read_timeout_secs`.
pub const DEFAULT_BODY_READ_TIMEOUT_SECS: u64 = 30;
/// `[serve] max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 512;

/// `[notify]`: a generic webhook that gets one JSON document per finished alert run
/// ([`crate::notify`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// An http(s) URL.
    pub url: String,
    /// The environment variable holding the bearer token sent with each post (the token never
    /// goes in the file).
    pub token_env: Option<String>,
    /// Where `diag serve` is reachable for readers (its `/runs/RUN_ID/report`), for the
    /// report link in each post.
    pub report_base_url: Option<String>,
}

impl Section for NotifyConfig {
    const KEY: &'static str = "notify";
}

/// `[serve]`: how `diag serve` listens and how much it takes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// The address to listen on: loopback unless told otherwise.
    pub listen: String,
    /// The environment variable holding the bearer token every request must carry (as
    /// Alertmanager's `http_config.authorization` sends it).
    pub token_env: String,
    /// Serve without a token (only with an explicit `true`).
    pub allow_no_token: bool,
    /// Take a webhook or read token shorter than [`MIN_TOKEN_BYTES`] (only with an explicit
    /// `true`: a short token can be guessed).
    pub allow_short_token: bool,
    /// Largest webhook body taken, in bytes; a larger one gets 413.
    pub max_body_bytes: u64,
    /// Webhook requests taken per second (a burst of as many is allowed); more get 429.
    pub max_requests_per_sec: u32,
    /// Notifications waiting or being investigated at most; past it the webhook gets 503.
    pub max_queue: u64,
    /// Runs this process investigates at once.
    pub concurrency: u32,
    /// How long a SIGTERM or Ctrl-C waits for the runs in flight before it interrupts them.
    pub drain_secs: u64,
    /// How far before an alert started its question looks, in seconds.
    pub lookback_secs: u64,
    /// The environment variable holding a token that opens any run's report (for tools);
    /// none: reports open only by their signed links. It never posts alerts.
    pub read_token_env: Option<String>,
    /// The environment variable holding the key that signs report links (at least 32 bytes);
    /// when it is not set, `diag serve` draws a random key at start, and its links stop
    /// opening when it stops.
    pub link_key_env: String,
    /// How long a report link opens: a duration like `30d`, `12h`, `45m`.
    pub report_link_ttl: String,
    /// Seconds a connection has to send a whole request head, counted from when it waits for
    /// one: a new connection that sends nothing, and a kept-alive one idle between
    /// requests, is closed after it.
    pub header_read_timeout_secs: u64,
    /// Seconds a request has to send its whole body; a slower one gets 408.
    pub body_read_timeout_secs: u64,
    /// Connections open at once at most; one past it is closed as soon as it is accepted.
    pub max_connections: u32,
}

impl Section for ServeConfig {
    const KEY: &'static str = "serve";
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: DEFAULT_LISTEN.into(),
            token_env: DEFAULT_TOKEN_ENV.into(),
            allow_no_token: false,
            allow_short_token: false,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_requests_per_sec: DEFAULT_MAX_REQUESTS_PER_SEC,
            max_queue: DEFAULT_MAX_QUEUE,
            concurrency: DEFAULT_CONCURRENCY,
            drain_secs: DEFAULT_DRAIN_SECS,
            lookback_secs: DEFAULT_LOOKBACK_SECS,
            read_token_env: None,
            link_key_env: DEFAULT_LINK_KEY_ENV.into(),
            report_link_ttl: DEFAULT_REPORT_LINK_TTL.into(),
            header_read_timeout_secs: DEFAULT_HEADER_READ_TIMEOUT_SECS,
            body_read_timeout_secs: DEFAULT_BODY_READ_TIMEOUT_SECS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// The alert sections of one configuration, read and checked.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AlertsConfig {
    pub notify: Option<NotifyConfig>,
    pub serve: ServeConfig,
}

impl AlertsConfig {
    /// Reads `[notify]` and `[serve]` of `config`'s file, refusing by key what cannot work.
    pub fn of(config: &Config) -> Result<AlertsConfig, ConfigError> {
        let notify = config.section::<NotifyConfig>()?;
        let serve = config.section::<ServeConfig>()?.unwrap_or_default();
        if let Some(n) = &notify {
            let url = n.url.trim();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(config.invalid("notify.url", "must start with http:// or https://"));
            }
        }
        for (key, zero) in [
            ("serve.max_body_bytes", serve.max_body_bytes == 0),
            (
                "serve.max_requests_per_sec",
                serve.max_requests_per_sec == 0,
            ),
            ("serve.max_queue", serve.max_queue == 0),
            ("serve.concurrency", serve.concurrency == 0),
            (
                "serve.header_read_timeout_secs",
                serve.header_read_timeout_secs == 0,
            ),
            (
                "serve.body_read_timeout_secs",
                serve.body_read_timeout_secs == 0,
            ),
            ("serve.max_connections", serve.max_connections == 0),
        ] {
            if zero {
                return Err(config.invalid(key, "must be at least 1"));
            }
        }
        Ok(AlertsConfig { notify, serve })
    }

    /// Parses configuration text and reads its alert sections (for tests and tools).
    pub fn parse(text: &str, file: &str) -> Result<AlertsConfig, ConfigError> {
        AlertsConfig::of(&Config::parse(text, file)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo configuration's commented `[serve]` and `[notify]` blocks, uncommented.
    fn demo_blocks_uncommented() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/demo/diag.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let mut out = String::new();
        let mut block = false;
        for line in text.lines() {
            if line == "# [serve]" || line == "# [notify]" {
                block = true;
            } else if block && !line.starts_with("# ") {
                block = false;
            }
            match line.strip_prefix("# ").filter(|_| block) {
                Some(uncommented) => out.push_str(uncommented),
                None => out.push_str(line),
            }
            out.push('\n');
        }
        out
    }

    #[test]
    fn the_demo_configurations_commented_serve_and_notify_blocks_parse_with_the_defaults() {
        let c = AlertsConfig::parse(&demo_blocks_uncommented(), "diag.toml").unwrap();
        let notify = c.notify.expect("the demo shows [notify]");
        assert!(notify.url.starts_with("https://"), "{}", notify.url);
        // What the demo shows is the default, but for the read token, which has none.
        assert_eq!(
            c.serve,
            ServeConfig {
                read_token_env: Some("DIAG_SERVE_READ_TOKEN".into()),
                ..ServeConfig::default()
            }
        );
    }

    #[test]
    fn notify_and_serve_take_their_defaults_and_refuse_what_cannot_work_by_key() {
        let c = AlertsConfig::parse("", "f.toml").unwrap();
        assert_eq!(c.notify, None);
        assert_eq!(c.serve.listen, "127.0.0.1:9464");
        assert_eq!(c.serve.token_env, "DIAG_SERVE_TOKEN");
        assert!(!c.serve.allow_no_token);
        assert_eq!(c.serve.read_token_env, None);
        assert_eq!(c.serve.link_key_env, "DIAG_SERVE_LINK_KEY");
        assert_eq!(c.serve.report_link_ttl, "30d");
        assert_eq!(c.serve.header_read_timeout_secs, 10);
        assert_eq!(c.serve.body_read_timeout_secs, 30);
        assert_eq!(c.serve.max_connections, 512);
        assert_eq!(c.serve.lookback_secs, 15 * 60);
        let c = AlertsConfig::parse(
            "[notify]\nurl = \"https://chat.example/hook\"\ntoken_env = \"T\"\n\
             [serve]\nconcurrency = 4\n",
            "f.toml",
        )
        .unwrap();
        assert_eq!(c.notify.unwrap().token_env.as_deref(), Some("T"));
        assert_eq!(c.serve.concurrency, 4);
        assert_eq!(
            c.serve.max_queue, 1000,
            "the other keys keep their defaults"
        );
        for (text, key) in [
            ("[notify]\nurl = \"ftp://x\"\n", "notify.url"),
            ("[serve]\nconcurrency = 0\n", "serve.concurrency"),
            ("[serve]\nmax_body_bytes = 0\n", "serve.max_body_bytes"),
            (
                "[serve]\nheader_read_timeout_secs = 0\n",
                "serve.header_read_timeout_secs",
            ),
            (
                "[serve]\nbody_read_timeout_secs = 0\n",
                "serve.body_read_timeout_secs",
            ),
            ("[serve]\nmax_connections = 0\n", "serve.max_connections"),
            ("[serve]\nlisten_on = \"x\"\n", "serve.listen_on"),
        ] {
            let e = AlertsConfig::parse(text, "f.toml").unwrap_err().to_string();
            assert!(e.contains(&format!("key `{key}`")), "{text}: {e}");
        }
    }

    #[test]
    fn a_section_is_read_with_the_files_errors_by_key_and_line() {
        let e = AlertsConfig::parse(
            "[models.a]\nbase_url = \"http://x\"\nmodel = \"m\"\n\n[serve]\nconcurrency = \"x\"\n",
            "bad.toml",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "config bad.toml: key `serve.concurrency`: invalid type: string \"x\", \
             expected u32 (line 6)"
        );
        let e = AlertsConfig::parse("[notify]\ntoken_env = \"T\"\n", "bad.toml")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "config bad.toml: key `notify.url`: is missing (line 1)");
        let e = AlertsConfig::parse("[serve]\nlisten_on = \"x\"\n", "bad.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("config bad.toml: key `serve.listen_on`: unknown key (expected "),
            "{e}"
        );
        assert!(e.ends_with("(line 2)"), "{e}");
    }
}
