//! `query_metrics`: PromQL against a Prometheus-compatible HTTP API (`/api/v1/query` and
//! `/api/v1/query_range`), returning the API's `data` object with one addition: every sample
//! carries its time as an RFC 3339 UTC string as a third element (`[1796047500, "120",
//! "2026-11-30T14:05:00Z"]`), so a claim about "14:05" can be bound to and checked against
//! the sample it speaks of (openspec/specs/verified-evidence/spec.md).
//!
//! Decisions:
//! - An instant query without `time` is evaluated at the run clock's "now", not the server's,
//!   so a run pinned to a time (a replay, a test) asks the same question again.
//! - Parameters are sent as a form-encoded POST body (the API accepts both), so PromQL's `{`,
//!   `[` and long selectors need no URL escaping and no URL length limit applies.
//! - `time`, `start` and `end` are passed through as given (RFC 3339 or Unix seconds, both of
//!   which Prometheus accepts); `step` likewise (`60s`, `1m` or seconds). Prometheus is the
//!   authority on its own syntax, and its `bad_data` error says precisely what is wrong.
//! - Errors: `bad_data` (bad PromQL, bad times) → [`ToolError::InvalidArguments`] with the
//!   server's message; `unavailable` or HTTP 5xx without an API body, refused connections and
//!   DNS failures → [`ToolError::Unavailable`]; the client timeout → [`ToolError::Timeout`];
//!   anything else → [`ToolError::Failed`]. Server text is cut at 500 characters, and messages
//!   name the server by scheme, host and port only, so credentials in a base URL never reach
//!   a recorded output.
//! - A response body larger than `max_response_bytes` is abandoned mid-stream with an error
//!   that asks for a narrower query; the registry's output cap applies after that.

use std::time::Duration;

use reqwest::Url;
use serde::Deserialize;
use serde_json::{json, Value};

use diag_core::tools::args::{bounded, invalid, Args};
use diag_core::tools::{Tool, ToolContext, ToolError, ToolFuture, ToolSpec};

const MAX_SERVER_TEXT: usize = 500;

/// Bounds of the Prometheus client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsLimits {
    /// Whole-request timeout (connect, send, read).
    pub timeout: Duration,
    /// Largest response body read.
    pub max_response_bytes: usize,
    /// Longest accepted PromQL expression, in characters.
    pub max_query_chars: usize,
}

impl Default for MetricsLimits {
    fn default() -> Self {
        MetricsLimits {
            timeout: diag_core::limits::Limits::DEFAULT.tools().timeout,
            max_response_bytes: 8 * 1024 * 1024,
            max_query_chars: 4096,
        }
    }
}

/// Why a `query_metrics` tool could not be set up from the config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Prometheus base URL '{url}': {reason}")]
pub struct MetricsSetupError {
    /// The URL with any credentials removed.
    pub url: String,
    pub reason: String,
}

/// The `query_metrics` tool bound to one Prometheus-compatible server.
#[derive(Clone)]
pub struct QueryMetrics {
    client: reqwest::Client,
    /// Always ends with `/`, so `join("api/v1/query")` keeps a path prefix such as
    /// `/prometheus/`.
    base: Url,
    /// `scheme://host:port`, for messages.
    server: String,
    limits: MetricsLimits,
}

impl QueryMetrics {
    /// `base_url` is the server root, e.g. `http://127.0.0.1:9090` or
    /// `https://metrics.example/prometheus`.
    pub fn new(base_url: &str, limits: MetricsLimits) -> Result<Self, MetricsSetupError> {
        let fail = |url: &str, reason: String| MetricsSetupError {
            url: redact(url),
            reason,
        };
        let mut base = Url::parse(base_url.trim()).map_err(|e| fail(base_url, e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(fail(base_url, "the scheme must be http or https".into()));
        }
        if base.host_str().is_none() {
            return Err(fail(base_url, "no host".into()));
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        base.set_query(None);
        base.set_fragment(None);
        let server = server_label(&base);
        let client = reqwest::Client::builder()
            .timeout(limits.timeout)
            .connect_timeout(limits.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| fail(base_url, format!("HTTP client: {e}")))?;
        Ok(QueryMetrics {
            client,
            base,
            server,
            limits,
        })
    }

    /// Runs one call's arguments against the server.
    async fn query(&self, arguments: &Value, cx: &ToolContext<'_>) -> Result<Value, ToolError> {
        let args = Args::new(arguments, &["query", "time", "start", "end", "step"])?;
        let query = args.req_str("query")?;
        if query.trim().is_empty() {
            return Err(invalid("parameter 'query' is empty".into()));
        }
        if query.chars().count() > self.limits.max_query_chars {
            return Err(invalid(format!(
                "parameter 'query' is longer than {} characters",
                self.limits.max_query_chars
            )));
        }
        let time = args.opt_str_or_number("time")?;
        let range = [
            ("start", args.opt_str_or_number("start")?),
            ("end", args.opt_str_or_number("end")?),
            ("step", args.opt_str_or_number("step")?),
        ];
        let given: Vec<&str> = range
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| *k)
            .collect();
        let (endpoint, mut params) = match (time, given.len()) {
            (time, 0) => {
                let time = time.unwrap_or_else(|| cx.clock.now().to_string());
                ("api/v1/query", vec![("time", time)])
            }
            (None, 3) => (
                "api/v1/query_range",
                range
                    .into_iter()
                    .map(|(k, v)| (k, v.unwrap_or_default()))
                    .collect(),
            ),
            (Some(_), _) => {
                return Err(invalid(
                    "give either 'time' (instant query) or 'start', 'end' and 'step' (range \
                     query), not both"
                        .into(),
                ))
            }
            (None, _) => {
                let missing: Vec<&str> = ["start", "end", "step"]
                    .into_iter()
                    .filter(|k| !given.contains(k))
                    .collect();
                return Err(invalid(format!(
                    "a range query needs 'start', 'end' and 'step'; missing: {}",
                    missing.join(", ")
                )));
            }
        };
        params.insert(0, ("query", query.to_string()));

        let url = self
            .base
            .join(endpoint)
            .map_err(|e| ToolError::Failed(format!("building the request URL: {e}")))?;
        let response = self
            .client
            .post(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&params)
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        let body = self.read_capped(response).await?;
        self.interpret(status, &body)
    }

    async fn read_capped(&self, mut response: reqwest::Response) -> Result<Vec<u8>, ToolError> {
        let max = self.limits.max_response_bytes;
        let too_big = || {
            ToolError::Failed(format!(
                "{} answered more than {max} bytes; narrow the query (fewer series, a shorter \
                 range or a larger step)",
                self.server
            ))
        };
        if response.content_length().is_some_and(|n| n > max as u64) {
            return Err(too_big());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.transport_error(&e))?
        {
            if body.len() + chunk.len() > max {
                return Err(too_big());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    fn interpret(&self, status: reqwest::StatusCode, body: &[u8]) -> Result<Value, ToolError> {
        #[derive(Deserialize)]
        struct ApiResponse {
            status: String,
            data: Option<Value>,
            #[serde(rename = "errorType")]
            error_type: Option<String>,
            error: Option<String>,
        }
        match serde_json::from_slice::<ApiResponse>(body) {
            Ok(r) if r.status == "success" => match r.data {
                Some(data) if status.is_success() => Ok(with_sample_times(data)),
                _ => Err(ToolError::Failed(format!(
                    "{} answered HTTP {} with status success but no data",
                    self.server,
                    status.as_u16()
                ))),
            },
            Ok(r) => {
                let kind = r.error_type.unwrap_or_else(|| "error".into());
                let message = format!(
                    "prometheus {}: {}",
                    bounded(&kind, 40),
                    bounded(r.error.as_deref().unwrap_or("no message"), MAX_SERVER_TEXT)
                );
                Err(match kind.as_str() {
                    "bad_data" => ToolError::InvalidArguments(message),
                    "unavailable" => ToolError::Unavailable(message),
                    _ => ToolError::Failed(message),
                })
            }
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let message = format!(
                    "{} answered HTTP {} without a Prometheus API response: {}",
                    self.server,
                    status.as_u16(),
                    bounded(text.trim(), 200)
                );
                if status.is_server_error() {
                    Err(ToolError::Unavailable(message))
                } else {
                    Err(ToolError::Failed(message))
                }
            }
        }
    }

    fn transport_error(&self, e: &reqwest::Error) -> ToolError {
        if e.is_timeout() {
            return ToolError::Timeout(diag_core::clock::millis(self.limits.timeout));
        }
        // reqwest's own text is generic ("error sending request"); the innermost cause
        // ("Connection refused") is what an operator needs. The URL is left out on purpose.
        let mut cause: &dyn std::error::Error = e;
        while let Some(inner) = cause.source() {
            cause = inner;
        }
        let detail = bounded(&cause.to_string(), 200);
        if e.is_connect() || e.is_request() || e.is_body() {
            ToolError::Unavailable(format!("cannot reach {}: {detail}", self.server))
        } else {
            ToolError::Failed(format!("request to {} failed: {detail}", self.server))
        }
    }
}

impl Tool for QueryMetrics {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "query_metrics".into(),
            description: "Run a PromQL query against the metrics server. An instant query \
                          takes 'time' (default: the run's current time); a range query takes \
                          'start', 'end' and 'step'. Returns Prometheus's data object \
                          (resultType and result); each sample is [unix time, value, RFC 3339 \
                          UTC time]."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "PromQL expression, e.g. \
                            sum by (code) (rate(http_requests_total{service=\"checkout\"}[5m]))"
                    },
                    "time": {
                        "type": "string",
                        "description": "Instant query evaluation time: RFC 3339 or Unix \
                            seconds."
                    },
                    "start": {
                        "type": "string",
                        "description": "Range query start: RFC 3339 or Unix seconds."
                    },
                    "end": {
                        "type": "string",
                        "description": "Range query end: RFC 3339 or Unix seconds."
                    },
                    "step": {
                        "type": "string",
                        "description": "Range query resolution: a duration such as 30s or \
                            1m, or seconds."
                    }
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        }
    }

    fn call<'a>(&'a self, arguments: &'a Value, cx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(self.query(arguments, cx))
    }
}

/// Adds each sample's time as an RFC 3339 UTC string, the third element of the sample
/// (`[1796047500, "120", "2026-11-30T14:05:00Z"]`), in the `value` of a vector series, the
/// `values` of a matrix series, and the `result` of a scalar or string result, so a claim can
/// quote the time it speaks of and the Gatekeeper can check it. A whole-second time has no
/// fraction; a fractional one has milliseconds (`2026-11-30T14:05:00.781Z`). A sample that is
/// not `[number, value]` is left as it is.
pub fn with_sample_times(mut data: Value) -> Value {
    let scalar = matches!(
        data.get("resultType").and_then(Value::as_str),
        Some("scalar" | "string")
    );
    match data.get_mut("result") {
        Some(sample) if scalar => add_time(sample),
        Some(Value::Array(series)) => {
            for s in series {
                if let Some(v) = s.get_mut("value") {
                    add_time(v);
                }
                if let Some(Value::Array(values)) = s.get_mut("values") {
                    values.iter_mut().for_each(add_time);
                }
            }
        }
        _ => {}
    }
    data
}

fn add_time(sample: &mut Value) {
    let Value::Array(items) = sample else {
        return;
    };
    if items.len() != 2 {
        return;
    }
    if let Some(text) = items[0].as_f64().and_then(rfc3339_utc) {
        items.push(Value::String(text));
    }
}

/// Unix seconds (possibly fractional) as RFC 3339 UTC, milliseconds only when not zero.
fn rfc3339_utc(seconds: f64) -> Option<String> {
    if !seconds.is_finite() {
        return None;
    }
    let ms = (seconds * 1000.0).round();
    if ms.abs() > 1e17 {
        return None;
    }
    // In range by the check above, so the cast is exact.
    let ms = ms as i64;
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
    let base = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    Some(match t.millisecond() {
        0 => format!("{base}Z"),
        frac => format!("{base}.{frac:03}Z"),
    })
}

fn server_label(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{}://{h}:{p}", url.scheme()),
        (Some(h), None) => format!("{}://{h}", url.scheme()),
        _ => url.scheme().to_string(),
    }
}

/// A URL for an error message: credentials removed, or a placeholder when it does not parse
/// (the raw text might hold a password).
fn redact(url: &str) -> String {
    match Url::parse(url.trim()) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => "<unparsable URL>".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_carry_their_time_as_text() {
        let data = json!({"resultType": "matrix", "result": [
            {"metric": {}, "values": [[1796047500, "120"], [1796047500.781, "1"], ["x", "2"]]},
            {"metric": {}, "value": [1796047500, "3"]}]});
        assert_eq!(
            with_sample_times(data),
            json!({"resultType": "matrix", "result": [
                {"metric": {}, "values": [[1796047500, "120", "2026-11-30T14:05:00Z"],
                                          [1796047500.781, "1", "2026-11-30T14:05:00.781Z"],
                                          ["x", "2"]]},
                {"metric": {}, "value": [1796047500, "3", "2026-11-30T14:05:00Z"]}]})
        );
        assert_eq!(
            with_sample_times(json!({"resultType": "scalar", "result": [0, "1"]})),
            json!({"resultType": "scalar", "result": [0, "1", "1970-01-01T00:00:00Z"]})
        );
        // Already annotated samples are left alone.
        let done = json!({"resultType": "vector", "result": [
            {"metric": {}, "value": [1796047500, "3", "2026-11-30T14:05:00Z"]}]});
        assert_eq!(with_sample_times(done.clone()), done);
    }

    #[test]
    fn base_urls_keep_their_prefix_and_lose_credentials() {
        let m =
            QueryMetrics::new("http://u:secret@host:9090/prom", MetricsLimits::default()).unwrap();
        assert_eq!(
            m.base.join("api/v1/query").unwrap().path(),
            "/prom/api/v1/query"
        );
        assert_eq!(m.server, "http://host:9090");
        let e = QueryMetrics::new("ftp://u:secret@host", MetricsLimits::default())
            .err()
            .unwrap();
        assert!(!e.to_string().contains("secret"), "{e}");
        assert!(QueryMetrics::new("not a url", MetricsLimits::default()).is_err());
    }
}
