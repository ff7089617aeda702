//! What `diag serve` and `diag investigate` read from the environment variables the
//! configuration names: the webhook's bearer token, the read token, the report link key (and
//! how long a link opens), and the result webhook's target with its token. A secret's value
//! is never part of a message; a variable's name is, bounded.

use std::time::Duration;

use diag_ask::config::parse_duration;
use diag_core::text::one_line;

use crate::config::{AlertsConfig, MIN_TOKEN_BYTES};
use crate::links::{LinkKey, ReportLinks};
use crate::notify::NotifyTarget;

/// Why a secret or a setting that goes with it cannot be used: the configuration's or the
/// environment's fault, unless `internal` (no random key could be drawn).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SecretError {
    pub message: String,
    /// What the operator can do about it.
    pub hint: Option<&'static str>,
    pub internal: bool,
}

impl SecretError {
    fn new(message: impl Into<String>) -> Self {
        SecretError {
            message: message.into(),
            hint: None,
            internal: false,
        }
    }

    fn hint(mut self, hint: &'static str) -> Self {
        self.hint = Some(hint);
        self
    }
}

/// The bearer token: the variable `[serve] token_env` names, non-empty; none only with
/// `allow_no_token = true`.
pub fn token(config: &AlertsConfig) -> Result<Option<String>, SecretError> {
    let var = config.serve.token_env.trim();
    let token = std::env::var(var)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    match token {
        Some(t) => long_enough(config, t, "bearer token", "token_env", var).map(Some),
        None if config.serve.allow_no_token => Ok(None),
        None => Err(SecretError::new(format!(
            "no bearer token: [serve] token_env names {}, which is not set",
            one_line(var, 80)
        ))
        .hint("set it to a long random string, as Alertmanager's http_config.authorization.credentials sends it, or set [serve] allow_no_token = true")),
    }
}

/// `token` when it has at least [`MIN_TOKEN_BYTES`] bytes or `[serve] allow_short_token =
/// true`; else an error naming the variable and how long the token is, never its value.
fn long_enough(
    config: &AlertsConfig,
    token: String,
    what: &str,
    key: &str,
    var: &str,
) -> Result<String, SecretError> {
    if token.len() >= MIN_TOKEN_BYTES || config.serve.allow_short_token {
        return Ok(token);
    }
    Err(SecretError::new(format!(
        "the {what} in {} ([serve] {key}) has {} bytes, fewer than {MIN_TOKEN_BYTES}: a short \
         token can be guessed",
        one_line(var, 80),
        token.len()
    ))
    .hint("set it to a long random string (openssl rand -hex 32), or set [serve] allow_short_token = true"))
}

/// The read token, when `[serve] read_token_env` names one: it must be set, and it must not
/// be the webhook token (a reader's token must not post alerts).
pub fn read_token(
    config: &AlertsConfig,
    webhook: Option<&str>,
) -> Result<Option<String>, SecretError> {
    let Some(var) = config.serve.read_token_env.as_deref().map(str::trim) else {
        return Ok(None);
    };
    let token = std::env::var(var)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            SecretError::new(format!(
                "no read token: [serve] read_token_env names {}, which is not set",
                one_line(var, 80)
            ))
        })?;
    let token = long_enough(config, token, "read token", "read_token_env", var)?;
    if webhook == Some(token.as_str()) {
        return Err(SecretError::new(
            "the read token ([serve] read_token_env) is the webhook token: a reader could post alerts",
        )
        .hint("set them to two different random strings"));
    }
    Ok(Some(token))
}

/// What signs report links: the key from `[serve] link_key_env` when it is set, else a
/// random key drawn now and held only in memory.
pub fn report_links(config: &AlertsConfig) -> Result<ReportLinks, SecretError> {
    let ttl = report_link_ttl(config)?;
    let key = match link_key_from_env(config)? {
        Some(key) => key,
        None => LinkKey::random().map_err(|e| SecretError {
            internal: true,
            ..SecretError::new(e.to_string())
        })?,
    };
    Ok(ReportLinks { key, ttl })
}

/// How long a report link opens (`[serve] report_link_ttl`).
pub fn report_link_ttl(config: &AlertsConfig) -> Result<Duration, SecretError> {
    let ttl = parse_duration(&config.serve.report_link_ttl)
        .map_err(|e| SecretError::new(format!("[serve] report_link_ttl: {e}")))?;
    if ttl.is_zero() {
        return Err(SecretError::new(
            "[serve] report_link_ttl: a report link must open for some time (at least 1s)",
        ));
    }
    Ok(ttl)
}

/// The report link key from the variable `[serve] link_key_env` names, if it is set; one
/// shorter than [`crate::links::MIN_KEY_BYTES`] is refused (the key is never shown).
pub fn link_key_from_env(config: &AlertsConfig) -> Result<Option<LinkKey>, SecretError> {
    let var = config.serve.link_key_env.trim();
    let Some(secret) = std::env::var_os(var).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    use std::os::unix::ffi::OsStrExt as _;
    LinkKey::from_secret(secret.as_bytes())
        .map(Some)
        .map_err(|e| {
            SecretError::new(format!(
                "[serve] link_key_env names {}: {e}",
                one_line(var, 80)
            ))
            .hint("set it to a long random string, e.g. the output of `openssl rand -hex 32`")
        })
}

/// The configured result webhook, with its token read from the environment. Its report
/// links are signed with `links` (`diag serve`'s), or else with the key `[serve]
/// link_key_env` names when it is set, so that they open in `diag serve`; without either
/// they open only with the read token.
pub fn notify_target(
    config: &AlertsConfig,
    links: Option<ReportLinks>,
) -> Result<Option<NotifyTarget>, SecretError> {
    let Some(n) = &config.notify else {
        return Ok(None);
    };
    let links = match (links, link_key_from_env(config)?) {
        (Some(l), _) => Some(l),
        (None, Some(key)) => Some(ReportLinks {
            key,
            ttl: report_link_ttl(config)?,
        }),
        (None, None) => None,
    };
    let token = match &n.token_env {
        Some(var) => Some(std::env::var(var).map_err(|_| {
            SecretError::new(format!("[notify] token_env names {var}, which is not set"))
        })?),
        None => None,
    };
    Ok(Some(NotifyTarget {
        url: n.url.trim().to_string(),
        token,
        report_base: n.report_base_url.clone(),
        links,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_token_is_refused_by_length_unless_allowed_and_never_shown() {
        let mut config = AlertsConfig::default();
        let short = "hunter2hunter2".to_string();
        let e = long_enough(
            &config,
            short.clone(),
            "bearer token",
            "token_env",
            "TOKEN_VAR",
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "the bearer token in TOKEN_VAR ([serve] token_env) has 14 bytes, fewer than 32: a \
             short token can be guessed"
        );
        assert!(!e.message.contains("hunter2"));
        let long = "x".repeat(MIN_TOKEN_BYTES);
        assert_eq!(
            long_enough(&config, long.clone(), "read token", "read_token_env", "V"),
            Ok(long)
        );
        config.serve.allow_short_token = true;
        assert_eq!(
            long_enough(&config, short.clone(), "bearer token", "token_env", "V"),
            Ok(short)
        );
    }
}
