//! Alertmanager's API v2, read: `GET /api/v2/alerts` with the matchers Alertmanager takes
//! (`filter=…`, repeated), active alerts only, silenced and inhibited ones when asked for.
//! One request; every failure is one line ([`AlertmanagerError`]).

use std::time::Duration;

use thiserror::Error;

use diag_core::alert::{parse_api_alerts, AlertError, ListedAlert};
use diag_core::text::one_line;

/// How long the API has to answer.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Most bytes of an API answer read (a million alerts of 1 KiB would not fit a diagnosis
/// anyway).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// What to list.
#[derive(Debug, Clone, Default)]
pub struct AlertQuery {
    /// Matchers as Alertmanager takes them: `alertname="X"`, `service=~"check.*"`, `env!="dev"`.
    pub filters: Vec<String>,
    /// Also the silenced alerts.
    pub silenced: bool,
    /// Also the inhibited alerts.
    pub inhibited: bool,
}

#[derive(Debug, Error)]
pub enum AlertmanagerError {
    #[error("{0}: not an http(s) URL")]
    Url(String),
    #[error("Alertmanager at {url} did not answer: {detail}")]
    Unreachable { url: String, detail: String },
    #[error("Alertmanager at {url} answered HTTP {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("Alertmanager at {url} answered more than {MAX_BODY_BYTES} bytes")]
    TooLarge { url: String },
    #[error("Alertmanager at {url}: {source}")]
    Document {
        url: String,
        #[source]
        source: AlertError,
    },
}

/// A client of one Alertmanager.
pub struct Alertmanager {
    base: String,
    http: reqwest::Client,
}

impl Alertmanager {
    /// A client of the Alertmanager at `url` (its root, e.g. `http://127.0.0.1:9093`; a
    /// trailing `/` or `/api/v2` is taken off).
    pub fn new(url: &str) -> Result<Alertmanager, AlertmanagerError> {
        let trimmed = url.trim().trim_end_matches('/');
        let base = trimmed
            .strip_suffix("/api/v2")
            .unwrap_or(trimmed)
            .to_string();
        let lower = base.to_ascii_lowercase();
        if !(lower.starts_with("http://") || lower.starts_with("https://"))
            || reqwest::Url::parse(&base).is_err()
        {
            return Err(AlertmanagerError::Url(one_line(url, 200)));
        }
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("diag/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| AlertmanagerError::Unreachable {
                url: base.clone(),
                detail: one_line(&e.to_string(), 200),
            })?;
        Ok(Alertmanager { base, http })
    }

    /// Where it is (no credentials are ever part of it: a URL with userinfo is shown
    /// without).
    pub fn url(&self) -> String {
        match reqwest::Url::parse(&self.base) {
            Ok(mut u) => {
                let _ = u.set_password(None);
                let _ = u.set_username("");
                u.to_string().trim_end_matches('/').to_string()
            }
            Err(_) => self.base.clone(),
        }
    }

    /// The alerts `query` selects, as the API lists them.
    pub async fn alerts(&self, query: &AlertQuery) -> Result<Vec<ListedAlert>, AlertmanagerError> {
        let mut params: Vec<(&str, String)> = vec![
            ("active", "true".into()),
            ("silenced", query.silenced.to_string()),
            ("inhibited", query.inhibited.to_string()),
            ("unprocessed", "true".into()),
        ];
        params.extend(query.filters.iter().map(|f| ("filter", f.clone())));
        let url = self.url();
        let unreachable = |e: reqwest::Error| AlertmanagerError::Unreachable {
            url: url.clone(),
            detail: one_line(&error_chain(&e), 300),
        };
        let mut response = self
            .http
            .get(format!("{}/api/v2/alerts", self.base))
            .query(&params)
            .send()
            .await
            .map_err(unreachable)?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_BODY_BYTES {
                return Err(AlertmanagerError::TooLarge { url });
            }
        }
        if !status.is_success() {
            return Err(AlertmanagerError::Status {
                url,
                status: status.as_u16(),
                body: one_line(String::from_utf8_lossy(&body).trim(), 200),
            });
        }
        parse_api_alerts(&body).map_err(|source| AlertmanagerError::Document { url, source })
    }
}

/// An error with its causes, on one line (reqwest's own message leaves out why a connection
/// failed).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let line = s.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = s.source();
    }
    text
}
