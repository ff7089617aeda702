//! Alertmanager's API v2, read: `GET /api/v2/alerts` with the matchers Alertmanager takes
//! (`filter=…`, repeated), active alerts only, silenced and inhibited ones when asked for.
//! One request; every failure is one line ([`AlertmanagerError`]).

use std::time::Duration;

use thiserror::Error;

use diag_core::alert::{parse_api_alerts, AlertError, ListedAlert};
use diag_core::env_vars::EnvVars;
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

/// How diag authenticates to an Alertmanager behind a proxy that asks for it. The values are
/// never shown: `Debug` names the kind only.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    Bearer(String),
    Basic { user: String, password: String },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credentials::Bearer(_) => "Credentials::Bearer(…)",
            Credentials::Basic { .. } => "Credentials::Basic(…)",
        })
    }
}

impl Credentials {
    /// From the environment variables' values ([`EnvVars::DIAG_ALERTMANAGER_TOKEN`], `_USER`,
    /// `_PASSWORD`; empty counts as unset): a token, or a user with a password, or none.
    /// Both kinds, or half of the basic pair, is refused with one line naming the variables.
    pub fn from_values(
        token: Option<String>,
        user: Option<String>,
        password: Option<String>,
    ) -> Result<Option<Credentials>, String> {
        let set = |v: Option<String>| v.filter(|v| !v.is_empty());
        let (t, u, p) = (
            EnvVars::DIAG_ALERTMANAGER_TOKEN,
            EnvVars::DIAG_ALERTMANAGER_USER,
            EnvVars::DIAG_ALERTMANAGER_PASSWORD,
        );
        match (set(token), set(user), set(password)) {
            (None, None, None) => Ok(None),
            (Some(token), None, None) => Ok(Some(Credentials::Bearer(token))),
            (None, Some(user), Some(password)) => Ok(Some(Credentials::Basic { user, password })),
            (Some(_), _, _) => Err(format!(
                "{t} and {u}/{p} are both set: set the bearer token or the basic-auth pair, not both"
            )),
            (None, Some(_), None) => Err(format!("{u} is set without {p}")),
            (None, None, Some(_)) => Err(format!("{p} is set without {u}")),
        }
    }

    /// From this process's environment.
    pub fn from_env() -> Result<Option<Credentials>, String> {
        let var = |name: &str| std::env::var(name).ok();
        Credentials::from_values(
            var(EnvVars::DIAG_ALERTMANAGER_TOKEN),
            var(EnvVars::DIAG_ALERTMANAGER_USER),
            var(EnvVars::DIAG_ALERTMANAGER_PASSWORD),
        )
    }
}

/// A client of one Alertmanager.
pub struct Alertmanager {
    base: String,
    http: reqwest::Client,
    credentials: Option<Credentials>,
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
        Ok(Alertmanager {
            base,
            http,
            credentials: None,
        })
    }

    /// Sends `credentials` with every request.
    pub fn with_credentials(mut self, credentials: Option<Credentials>) -> Self {
        self.credentials = credentials;
        self
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
        let mut request = self
            .http
            .get(format!("{}/api/v2/alerts", self.base))
            .query(&params);
        request = match &self.credentials {
            None => request,
            Some(Credentials::Bearer(token)) => request.bearer_auth(token),
            Some(Credentials::Basic { user, password }) => request.basic_auth(user, Some(password)),
        };
        let mut response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_BODY_BYTES {
                return Err(AlertmanagerError::TooLarge { url });
            }
        }
        if !status.is_success() {
            let mut body = one_line(String::from_utf8_lossy(&body).trim(), 200);
            if matches!(status.as_u16(), 401 | 403) {
                body.push_str(&format!(
                    " ({}: set {} for a bearer token, or {} and {} for basic auth)",
                    if self.credentials.is_some() {
                        "the credentials were refused"
                    } else {
                        "it asks for credentials"
                    },
                    EnvVars::DIAG_ALERTMANAGER_TOKEN,
                    EnvVars::DIAG_ALERTMANAGER_USER,
                    EnvVars::DIAG_ALERTMANAGER_PASSWORD
                ));
            }
            return Err(AlertmanagerError::Status {
                url,
                status: status.as_u16(),
                body,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn some(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    #[test]
    fn credentials_are_a_token_or_a_basic_pair_and_never_shown() {
        assert_eq!(Credentials::from_values(None, None, None), Ok(None));
        assert_eq!(Credentials::from_values(some(""), some(""), None), Ok(None));
        let bearer = Credentials::from_values(some("t0k3n"), None, None).unwrap();
        assert_eq!(bearer, Some(Credentials::Bearer("t0k3n".into())));
        let basic = Credentials::from_values(None, some("ops"), some("s3cret")).unwrap();
        assert_eq!(
            basic,
            Some(Credentials::Basic {
                user: "ops".into(),
                password: "s3cret".into()
            })
        );
        assert!(!format!("{bearer:?} {basic:?}").contains("t0k3n"));
        assert!(!format!("{basic:?}").contains("s3cret"));
        assert_eq!(
            Credentials::from_values(some("t"), some("u"), some("p")),
            Err(
                "DIAG_ALERTMANAGER_TOKEN and DIAG_ALERTMANAGER_USER/DIAG_ALERTMANAGER_PASSWORD \
                 are both set: set the bearer token or the basic-auth pair, not both"
                    .into()
            )
        );
        assert_eq!(
            Credentials::from_values(None, some("u"), None),
            Err("DIAG_ALERTMANAGER_USER is set without DIAG_ALERTMANAGER_PASSWORD".into())
        );
        assert_eq!(
            Credentials::from_values(None, None, some("p")),
            Err("DIAG_ALERTMANAGER_PASSWORD is set without DIAG_ALERTMANAGER_USER".into())
        );
    }
}
