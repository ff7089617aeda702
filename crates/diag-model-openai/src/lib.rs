//! The OpenAI-compatible adapter: [`OpenAiModel`] implements [`ChatModel`] by POSTing to
//! `{base}/chat/completions` (non-streaming) on OpenAI, vLLM, Ollama, llama.cpp, LiteLLM and
//! company gateways.
//!
//! What it promises:
//! - **Secrets.** The API key is read from the environment variable named in the config, goes
//!   only into the `Authorization: Bearer` header (marked sensitive), and never appears in
//!   `Debug` output, error messages or the request body. Error excerpts from the server are
//!   redacted (the key itself, `Bearer …`, `sk-…` tokens) and cut at 200 characters.
//! - **Classification** (openspec/specs/model-endpoint/spec.md). HTTP 408/409/429/5xx, timeouts, connection errors (refused,
//!   reset, dropped mid-body) and truncated or non-JSON answers are transient; every other
//!   status is permanent. A 429 or 503 carries the server's `Retry-After` in
//!   [`ModelError::retry_after`].
//! - **A bounded transport retry** below the graph's own technical retry: up to
//!   `max_transport_retries` extra attempts for transient errors only (see [`retry_wait`]).
//! - **Lenient parsing** of what real servers send (see [`parse_chat_completion`]).
//! - **What an endpoint taught** (the structured-output form it takes, its context size) is
//!   kept in an [`EndpointMemory`]: the model's own, or one shared with the other models of a
//!   run set up together ([`OpenAiModel::with_endpoint_memory`]).
//!
//! Base URL rule (see [`chat_completions_url`]): the user gives the base that ends before
//! `/chat/completions`, as OpenAI clients do (`https://api.openai.com/v1`,
//! `http://127.0.0.1:11434/v1`). A trailing slash is ignored; a URL with no path at all gets
//! `/v1`, where every known server listens; a URL already ending in `/chat/completions` is used
//! as given, for the rare gateway that serves it elsewhere.

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod wire;

use std::cmp::{max, min};
use std::ffi::OsString;
use std::fmt;
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde_json::{json, Map, Value};
use thiserror::Error;

use diag_core::model::Endpoint;
use diag_core::model::{
    ChatFuture, ChatModel, ChatRequest, ChatResponse, ErrorClass, FinishReason, Message,
    ModelError, Role, StructuredOutput, ToolCall, Usage,
};
use diag_core::model::{
    EndpointMemory, RefusedSampling, SamplingParameter, StructuredOutputSetting,
};
use diag_core::tools::ToolSpec;

/// Default time to establish a connection (TCP and TLS).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time for one whole attempt, from sending the request to the last byte of the answer.
/// Local models on a CPU can take minutes for a long answer.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Extra attempts after a transient failure, by default.
pub const DEFAULT_MAX_TRANSPORT_RETRIES: u32 = 2;
/// The first backoff; each further retry doubles it.
pub const RETRY_BASE_DELAY: Duration = Duration::from_millis(200);
/// The backoff never grows beyond this.
pub const RETRY_MAX_BACKOFF: Duration = Duration::from_secs(2);
/// The longest wait the transport retry accepts. A server asking for more (`Retry-After`) is not
/// retried here: the error goes up at once with `retry_after` set, so the caller decides rather
/// than this layer sleeping for a long time or retrying earlier than asked.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(5);
/// The longest pause a server may ask for (`Retry-After` on its last error) that the next
/// request to it waits out. A server asking for more gets no request until then: the call
/// fails at once, transient, with the time still to wait.
pub const MAX_HONOURED_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Answers larger than this are refused (a chat answer is kilobytes; this bounds memory).
pub const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;
/// Error messages quote at most this many characters of what the server said.
pub const ERROR_EXCERPT_CHARS: usize = 200;

/// How to reach one OpenAI-compatible endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiConfig {
    /// The base that ends before `/chat/completions` (see the module documentation).
    pub base_url: String,
    /// The model name sent in every request, and the name used in records.
    pub model: String,
    /// The name of the environment variable holding the API key; `None` sends no
    /// `Authorization` header (local Ollama or llama.cpp).
    pub api_key_env: Option<String>,
    pub connect_timeout: Duration,
    /// Per attempt, including reading the whole answer.
    pub request_timeout: Duration,
    /// Extra attempts after a transient failure (0 disables the transport retry).
    pub max_transport_retries: u32,
    /// Used when the request does not set its own; `None` sends none.
    pub temperature: Option<f32>,
    /// The sampling seed sent with every request when set.
    pub seed: Option<u64>,
    /// The most completion tokens any request may ask for; a request asking for fewer keeps
    /// its own, one without its own uses this.
    pub max_tokens: Option<u32>,
    /// How output contracts are sent (`response_format`).
    pub structured_output: StructuredOutputSetting,
    /// The model's context size in tokens; `None` until a context-length error states it.
    pub context_tokens: Option<u32>,
}

impl OpenAiConfig {
    /// A config with the defaults above, no API key, and no sampling overrides.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_transport_retries: DEFAULT_MAX_TRANSPORT_RETRIES,
            temperature: None,
            seed: None,
            max_tokens: None,
            structured_output: StructuredOutputSetting::Auto,
            context_tokens: None,
        }
    }
}

/// Why an endpoint could not be set up. Messages name the variable or the setting, never the
/// key's value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error("the API key variable {var} (api_key_env) is not set in the environment")]
    MissingApiKey { var: String },
    #[error("the API key variable {var} (api_key_env) is empty")]
    EmptyApiKey { var: String },
    #[error(
        "the API key variable {var} (api_key_env) holds characters that cannot go into an HTTP header"
    )]
    InvalidApiKey { var: String },
    #[error("api_key_env must name an environment variable, got `{var}`")]
    InvalidApiKeyEnv { var: String },
    #[error("base_url `{url}`: {reason}")]
    InvalidBaseUrl { url: String, reason: String },
    #[error("model must not be empty")]
    EmptyModel,
    #[error("request_timeout and connect_timeout must be greater than zero")]
    ZeroTimeout,
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
}

/// The API key. Its `Debug` prints `***`; it has no `Display`, so it cannot be formatted into a
/// message by accident.
#[derive(Clone)]
struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// The sampling parameters one request is sent with.
#[derive(Debug, Clone, Copy, Default)]
struct Sampling {
    temperature: Option<f32>,
    seed: Option<u64>,
}

impl Sampling {
    /// These parameters less those `refused`.
    fn without(self, refused: RefusedSampling) -> Sampling {
        Sampling {
            temperature: self
                .temperature
                .filter(|_| !refused.refuses(SamplingParameter::Temperature)),
            seed: self
                .seed
                .filter(|_| !refused.refuses(SamplingParameter::Seed)),
        }
    }

    /// The parameters it sends.
    fn sent(self) -> Vec<SamplingParameter> {
        let mut sent = Vec::new();
        if self.temperature.is_some() {
            sent.push(SamplingParameter::Temperature);
        }
        if self.seed.is_some() {
            sent.push(SamplingParameter::Seed);
        }
        sent
    }
}

/// A chat model behind an OpenAI-compatible `/chat/completions` endpoint.
pub struct OpenAiModel {
    model: String,
    endpoint: Url,
    api_key: Option<ApiKey>,
    client: reqwest::Client,
    request_timeout: Duration,
    connect_timeout: Duration,
    max_transport_retries: u32,
    temperature: Option<f32>,
    seed: Option<u64>,
    max_tokens: Option<u32>,
    structured_output: StructuredOutputSetting,
    context_tokens: Option<u32>,
    /// The variable the key comes from, named in authentication errors (never its value).
    api_key_env: Option<String>,
    /// The key of what the endpoint taught, in `memory`: its base URL and model name.
    learned_key: Endpoint,
    /// What the endpoints taught, shared with the models set up with this one.
    memory: EndpointMemory,
    /// Set from the `Retry-After` of an error handed to the caller: no request goes to the
    /// server before this instant (the node's technical retry, or another agent sharing the
    /// endpoint, waits for it instead of hitting the same 429).
    not_before: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Whether this adapter already asked its server what it is ([`Self::identify_server`]).
    identified: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for OpenAiModel {
    // By hand, so that the key can never be printed even if a field is added carelessly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("model", &self.model)
            .field("endpoint", &self.endpoint.as_str())
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_transport_retries", &self.max_transport_retries)
            .field("temperature", &self.temperature)
            .field("seed", &self.seed)
            .field("max_tokens", &self.max_tokens)
            .field("structured_output", &self.structured_output)
            .field("context_tokens", &self.context_tokens)
            .finish()
    }
}

impl OpenAiModel {
    /// Builds the adapter, reading the API key from the process environment. It starts with
    /// an [`EndpointMemory`] of its own; see [`OpenAiModel::with_endpoint_memory`].
    pub fn new(config: OpenAiConfig) -> Result<Self, ConfigError> {
        Self::new_with_env(config, |name| std::env::var_os(name))
    }

    /// Builds the adapter with `env` standing in for the process environment (tests, and
    /// callers that resolve variables themselves). Only `config.api_key_env` is looked up.
    pub fn new_with_env(
        config: OpenAiConfig,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Self, ConfigError> {
        if config.model.trim().is_empty() {
            return Err(ConfigError::EmptyModel);
        }
        if config.request_timeout.is_zero() || config.connect_timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout);
        }
        let endpoint = chat_completions_url(&config.base_url)?;
        let api_key = match &config.api_key_env {
            None => None,
            Some(var) => Some(read_api_key(var, &env)?),
        };

        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        if let (Some(key), Some(var)) = (&api_key, &config.api_key_env) {
            let mut value = HeaderValue::from_str(&format!("Bearer {}", key.0))
                .map_err(|_| ConfigError::InvalidApiKey { var: var.clone() })?;
            // Keeps the value out of hyper's and reqwest's debug output.
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }

        let client = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            // A redirected POST turns into a GET on some codes and could carry the key to
            // another host; a 3xx is reported (permanent) so the operator fixes base_url.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("diag/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConfigError::Client(e.without_url().to_string()))?;

        let learned_key = endpoint_key(&endpoint, &config.model);
        Ok(OpenAiModel {
            model: config.model,
            learned_key,
            endpoint,
            api_key,
            client,
            request_timeout: config.request_timeout,
            connect_timeout: config.connect_timeout,
            max_transport_retries: config.max_transport_retries,
            temperature: config.temperature,
            seed: config.seed,
            max_tokens: config.max_tokens,
            structured_output: config.structured_output,
            context_tokens: config.context_tokens,
            api_key_env: config.api_key_env,
            memory: EndpointMemory::default(),
            not_before: std::sync::Mutex::new(None),
            identified: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The adapter reading and recording what its endpoint taught in `memory` (a clone of the
    /// one the other models of the run hold), instead of in a memory of its own: a model on
    /// an endpoint another model already stepped down on starts where that one stopped.
    pub fn with_endpoint_memory(mut self, memory: EndpointMemory) -> Self {
        self.memory = memory;
        self
    }

    /// The full URL requests go to.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_str()
    }

    /// The structured-output form the next request with an output contract uses: the
    /// setting's first form, or what the endpoint's refusals taught (its [`EndpointMemory`]).
    pub fn structured_form(&self) -> StructuredOutput {
        let learned = self.memory.learned(&self.learned_key).form;
        match self.structured_output {
            StructuredOutputSetting::Auto => learned.unwrap_or(StructuredOutput::JsonSchema),
            StructuredOutputSetting::JsonSchema => StructuredOutput::JsonSchema,
            // Only the one step down this setting allows: the schema dropped.
            StructuredOutputSetting::JsonObject => match learned {
                Some(StructuredOutput::JsonObject | StructuredOutput::Off) => {
                    StructuredOutput::JsonObject
                }
                _ => StructuredOutput::JsonObjectSchema,
            },
            StructuredOutputSetting::Off => StructuredOutput::Off,
        }
    }

    /// How `request`'s output contract goes on the wire in `form`: not at all without a
    /// contract, and never beside tools. A server that constrains output compiles the contract
    /// to a grammar over the whole answer (llama.cpp, Ollama, vLLM's guided decoding), which
    /// leaves the model no way to write a tool call; the OpenAI-compatible API does not say
    /// which servers do, so no request that offers tools carries one. The Executor's evidence
    /// document then comes from its evidence turn, which offers no tools
    /// (openspec/specs/agent-runtime/spec.md). The answer records the form as `off`.
    fn form_for(request: &ChatRequest, form: StructuredOutput) -> Option<StructuredOutput> {
        request.response_format.as_ref()?;
        if !request.tools.is_empty() {
            return Some(StructuredOutput::Off);
        }
        Some(form)
    }

    /// The JSON body sent for `request` (`stream: false`) with the structured-output form this
    /// endpoint currently takes. The key is never part of it.
    pub fn wire_request(&self, request: &ChatRequest) -> Value {
        self.wire_request_in(
            request,
            Self::form_for(request, self.structured_form()),
            self.sampling(request),
        )
    }

    /// The sampling parameters `request` goes with: its own temperature or the configured
    /// one, and the configured seed, less those the endpoint refused (its [`EndpointMemory`]).
    fn sampling(&self, request: &ChatRequest) -> Sampling {
        Sampling {
            temperature: request.temperature.or(self.temperature),
            seed: self.seed,
        }
        .without(self.memory.learned(&self.learned_key).refused_sampling)
    }

    /// The JSON body for `request` with its output contract sent in `form` and `sampling`.
    fn wire_request_in(
        &self,
        request: &ChatRequest,
        form: Option<StructuredOutput>,
        sampling: Sampling,
    ) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), Value::String(self.model.clone()));
        body.insert(
            "messages".into(),
            Value::Array(request.messages.iter().map(wire_message).collect()),
        );
        // Some servers (vLLM among them) reject an empty `tools` array, so it is left out.
        if !request.tools.is_empty() {
            body.insert(
                "tools".into(),
                Value::Array(request.tools.iter().map(wire_tool).collect()),
            );
            // `tool_choice` goes only beside `tools`: OpenAI refuses it without them, and a
            // request without tools lets no server call one. llama.cpp's function-calling
            // format drops the tools unless it is set.
            if let Some(choice) = request.tool_choice {
                body.insert("tool_choice".into(), json!(choice.as_str()));
            }
        }
        if let Some(t) = sampling.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(seed) = sampling.seed {
            body.insert("seed".into(), json!(seed));
        }
        let max_tokens = match (request.max_tokens, self.max_tokens) {
            (Some(r), Some(m)) => Some(r.min(m)),
            (r, m) => r.or(m),
        };
        if let Some(m) = max_tokens {
            body.insert("max_tokens".into(), json!(m));
        }
        if let (Some(schema), Some(form)) = (&request.response_format, form) {
            if let Some(format) = wire::response_format(schema, form) {
                body.insert("response_format".into(), format);
            }
        }
        body.insert("stream".into(), Value::Bool(false));
        Value::Object(body)
    }

    /// One call: sent in the structured-output form the endpoint takes, and sent again at
    /// once in the next form when the server refuses that one (`auto`, learned in the
    /// [`EndpointMemory`] from then on). What was used is recorded on the answer or the error.
    async fn complete_negotiated(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        if request.response_format.is_some() && request.tools.is_empty() {
            self.identify_server().await;
        }
        // The sampling parameters this call saw refused, left out even were the memory not
        // to keep them.
        let mut dropped = RefusedSampling::default();
        loop {
            let form = Self::form_for(request, self.structured_form());
            let sampling = self.sampling(request).without(dropped);
            let outcome = self.complete_with_retries(request, form, sampling).await;
            let mut err = match outcome {
                Ok(mut response) => {
                    response.structured_output = form;
                    return Ok(response);
                }
                Err(err) => err,
            };
            err.structured_output = form;
            let refused = form.filter(|f| *f != StructuredOutput::Off).filter(|_| {
                err.status
                    .is_some_and(|s| wire::refuses_response_format(s, &err.message))
            });
            if let Some(refused) = refused {
                match self.structured_output.after_refusal(refused) {
                    Some(next) => {
                        tracing::info!(
                            model = %self.model,
                            refused = refused.as_str(),
                            next = next.as_str(),
                            "the endpoint refused response_format; using the next form from now on"
                        );
                        self.memory
                            .learn(&self.learned_key, |l| l.form = Some(next));
                        continue;
                    }
                    None => err.message.push_str(&format!(
                        " (structured_output = \"{}\" for this model; the endpoint refused \
                         response_format as {}: set structured_output to \"auto\" or \"off\")",
                        self.structured_output.as_str(),
                        refused.as_str()
                    )),
                }
            }
            // A refused sampling parameter (one that was sent, named by a 400 or 422) is
            // learned, and the request goes again at once without it; each pass drops at
            // least one more (`dropped`), so this ends.
            let refused_sampling = match (refused, err.status) {
                (None, Some(status)) => {
                    wire::refused_sampling(status, &err.message, &sampling.sent())
                }
                _ => RefusedSampling::default(),
            };
            if !refused_sampling.is_empty() {
                let names: Vec<&str> = refused_sampling
                    .parameters()
                    .iter()
                    .map(|p| p.as_str())
                    .collect();
                tracing::info!(
                    model = %self.model,
                    refused = %names.join(", "),
                    "the endpoint refused a sampling parameter; sending it no more"
                );
                self.memory.learn(&self.learned_key, |l| {
                    l.refused_sampling = l.refused_sampling.union(refused_sampling);
                });
                dropped = dropped.union(refused_sampling);
                continue;
            }
            if err.class == ErrorClass::ContextOverflow && self.context_tokens.is_none() {
                if let Some(n) = err.context_tokens {
                    self.memory
                        .learn(&self.learned_key, |l| l.context_tokens = Some(n));
                }
            }
            if err.is_authentication() {
                err.message.push_str(&match &self.api_key_env {
                    Some(var) => format!(
                        " (the key is read from the environment variable {var}, named by \
                         api_key_env)"
                    ),
                    None => " (no API key is sent: name the variable holding one with \
                             api_key_env)"
                        .to_string(),
                });
            }
            return Err(err);
        }
    }

    /// Under `auto`, before the first output contract sent to an endpoint that taught nothing
    /// yet: asks the server what it is (`GET {base}/models`, once per adapter, bounded). A
    /// llama.cpp server (`owned_by: "llamacpp"`) compiles every contract to a grammar and
    /// takes llama.cpp's own form (`json_object` with `schema`), in which diag sends each
    /// contract's grammar form: list bounds, ids by position and the other rules a strict
    /// `json_schema` form leaves out ([`diag_core::model::OutputSchema::grammar`]). That form
    /// is learned like a refusal's (and kept by the run store). Any other answer, or none,
    /// teaches nothing: `json_schema` is tried first as before.
    async fn identify_server(&self) {
        use std::sync::atomic::Ordering;
        if self.structured_output != StructuredOutputSetting::Auto
            || self.memory.learned(&self.learned_key).form.is_some()
            || self.identified.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let mut url = self.endpoint.clone();
        let path = url.path().to_string();
        let base = path.strip_suffix("/chat/completions").unwrap_or(&path);
        url.set_path(&format!("{base}/models"));
        let asked = self
            .client
            .get(url)
            .timeout(min(self.request_timeout, IDENTIFY_TIMEOUT))
            .send()
            .await;
        let Ok(response) = asked else {
            return;
        };
        if !response.status().is_success() {
            return;
        }
        let Ok(bytes) = self.read_body(response).await else {
            return;
        };
        let Ok(models) = serde_json::from_slice::<Value>(&bytes) else {
            return;
        };
        if is_llama_cpp_server(&models) {
            tracing::info!(
                model = %self.model,
                form = StructuredOutput::JsonObjectSchema.as_str(),
                "the endpoint is a llama.cpp server: output contracts go as its grammar form"
            );
            self.memory.learn(&self.learned_key, |l| {
                l.form = Some(StructuredOutput::JsonObjectSchema)
            });
        }
    }

    async fn complete_with_retries(
        &self,
        request: &ChatRequest,
        form: Option<StructuredOutput>,
        sampling: Sampling,
    ) -> Result<ChatResponse, ModelError> {
        let body = serde_json::to_vec(&self.wire_request_in(request, form, sampling))
            .map_err(|e| ModelError::permanent(format!("cannot encode the request: {e}")))?;
        self.wait_for_the_server().await?;
        let mut retries_used: u32 = 0;
        loop {
            let err = match self.attempt(&body).await {
                Ok(response) => return Ok(response),
                Err(err) => err,
            };
            // A refused response_format (llama.cpp answers it with a 500) is not retried as
            // it is: the caller sends the next form instead.
            let refused_format = form.is_some_and(|f| f != StructuredOutput::Off)
                && err
                    .status
                    .is_some_and(|s| wire::refuses_response_format(s, &err.message));
            let wait = if err.class == ErrorClass::Transient
                && !refused_format
                && retries_used < self.max_transport_retries
            {
                retry_wait(retries_used, err.retry_after)
            } else {
                None
            };
            match wait {
                Some(wait) => {
                    tracing::info!(
                        model = %self.model,
                        error = %err.message,
                        wait_ms = diag_core::clock::millis(wait),
                        "transient failure; retrying the request"
                    );
                    tokio::time::sleep(wait).await;
                    retries_used += 1;
                }
                None => {
                    if let Some(after) = err.retry_after {
                        *self.gate() = Some(tokio::time::Instant::now() + after);
                    }
                    return Err(with_attempts(err, retries_used + 1));
                }
            }
        }
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, Option<tokio::time::Instant>> {
        self.not_before.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits out the pause the server asked for with its last error, up to
    /// [`MAX_HONOURED_RETRY_AFTER`]; a longer one fails the call without sending it.
    async fn wait_for_the_server(&self) -> Result<(), ModelError> {
        let not_before = *self.gate();
        let Some(not_before) = not_before else {
            return Ok(());
        };
        let left = not_before.saturating_duration_since(tokio::time::Instant::now());
        if left > MAX_HONOURED_RETRY_AFTER {
            let mut err = ModelError::transient(format!(
                "not sent: the server asked for {} s before the next request (Retry-After), \
                 more than the {} s diag waits",
                left.as_secs_f64().ceil(),
                MAX_HONOURED_RETRY_AFTER.as_secs()
            ));
            err.retry_after = Some(left);
            return Err(err);
        }
        if !left.is_zero() {
            tracing::info!(
                model = %self.model,
                wait_ms = diag_core::clock::millis(left),
                "waiting out the server's Retry-After"
            );
        }
        tokio::time::sleep(left).await;
        Ok(())
    }

    /// One HTTP exchange, classified.
    async fn attempt(&self, body: &[u8]) -> Result<ChatResponse, ModelError> {
        let response = self
            .client
            .post(self.endpoint.clone())
            .body(body.to_vec())
            .send()
            .await
            .map_err(|e| self.transport_error(e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));

        if !status.is_success() {
            // The status decides the class; a body that cannot be read only loses the excerpt.
            let bytes = self.read_body(response).await.unwrap_or_default();
            let excerpt = self.redact(&error_excerpt(&bytes));
            let mut err =
                ModelError::from_status(status.as_u16(), status_message(status, &excerpt));
            let json_body = serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null);
            let full_text = match json_error_text(&json_body) {
                Some(t) => t,
                None => String::from_utf8_lossy(&bytes).into_owned(),
            };
            if status.is_client_error() || status.is_server_error() {
                if let Some((limit, prompt)) = wire::context_overflow(&json_body, &full_text) {
                    err.class = ErrorClass::ContextOverflow;
                    err.context_tokens = limit;
                    err.usage = prompt.map(|p| Usage {
                        prompt_tokens: p,
                        completion_tokens: 0,
                    });
                }
            }
            if err.usage.is_none() {
                err.usage = parse_usage(json_body.get("usage"));
            }
            if matches!(status.as_u16(), 429 | 503) {
                err.retry_after = retry_after;
            }
            if status.is_redirection() {
                err.message
                    .push_str(" (redirects are not followed: check base_url)");
            }
            return Err(err);
        }

        let bytes = self.read_body(response).await?;
        parse_chat_completion(&bytes).map_err(|mut e| {
            e.message = self.redact(&e.message);
            e
        })
    }

    /// Reads the whole answer, bounded by [`MAX_RESPONSE_BYTES`].
    async fn read_body(&self, mut response: reqwest::Response) -> Result<Vec<u8>, ModelError> {
        let too_large = || {
            ModelError::permanent(format!(
                "the answer is larger than {} MiB",
                MAX_RESPONSE_BYTES / (1024 * 1024)
            ))
        };
        if response
            .content_length()
            .is_some_and(|n| n > MAX_RESPONSE_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.transport_error(e))?
        {
            if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    /// Maps a reqwest failure to a classified error whose message holds no URL and no secret.
    fn transport_error(&self, e: reqwest::Error) -> ModelError {
        let cause = self.redact(&bounded(&root_cause(&e)));
        if e.is_timeout() {
            if e.is_connect() {
                return ModelError::transient(format!(
                    "connect timed out after {} ms",
                    self.connect_timeout.as_millis()
                ));
            }
            return ModelError::transient(format!(
                "timed out after {} ms",
                self.request_timeout.as_millis()
            ));
        }
        if e.is_connect() {
            return ModelError::transient(format!("cannot connect: {cause}"));
        }
        if e.is_builder() || e.is_redirect() {
            return ModelError::permanent(format!("cannot send the request: {cause}"));
        }
        if e.is_body() || e.is_decode() {
            return ModelError::transient(format!(
                "truncated response: the connection failed while reading the answer: {cause}"
            ));
        }
        // Everything else reqwest reports here is I/O on an established connection: reset,
        // closed before the answer, TLS failure mid-stream.
        ModelError::transient(format!("connection failed: {cause}"))
    }

    fn redact(&self, text: &str) -> String {
        redact_secrets(text, self.api_key.as_ref().map(|k| k.0.as_str()))
    }
}

impl ChatModel for OpenAiModel {
    fn name(&self) -> &str {
        &self.model
    }

    fn complete<'a>(&'a self, request: &'a ChatRequest) -> ChatFuture<'a> {
        Box::pin(self.complete_negotiated(request))
    }

    fn context_tokens(&self) -> Option<u32> {
        self.context_tokens
            .or_else(|| self.memory.learned(&self.learned_key).context_tokens)
    }

    /// A model that is sent output contracts gets the Executor's evidence turn; one set to
    /// `off` answers as it always did.
    fn evidence_turn(&self) -> bool {
        self.structured_output != StructuredOutputSetting::Off
    }
}

/// The longest the adapter waits for a server to say what it is.
pub const IDENTIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a `GET /models` answer is llama.cpp's server: it lists its models with
/// `owned_by: "llamacpp"`.
pub fn is_llama_cpp_server(models: &Value) -> bool {
    models
        .get("data")
        .and_then(Value::as_array)
        .is_some_and(|data| {
            !data.is_empty()
                && data
                    .iter()
                    .all(|m| m.get("owned_by").and_then(Value::as_str) == Some("llamacpp"))
        })
}

fn read_api_key(var: &str, env: &impl Fn(&str) -> Option<OsString>) -> Result<ApiKey, ConfigError> {
    let name = var.trim();
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return Err(ConfigError::InvalidApiKeyEnv {
            var: var.to_string(),
        });
    }
    let raw = env(name).ok_or_else(|| ConfigError::MissingApiKey {
        var: name.to_string(),
    })?;
    let value = raw.into_string().map_err(|_| ConfigError::InvalidApiKey {
        var: name.to_string(),
    })?;
    // A key pasted with a trailing newline is a common mistake; the newline is never part of it.
    let value = value.trim();
    if value.is_empty() {
        return Err(ConfigError::EmptyApiKey {
            var: name.to_string(),
        });
    }
    Ok(ApiKey(value.to_string()))
}

/// The key of what `model` behind `base_url` teaches ([`Endpoint`]): the base URL as requests
/// use it (see [`chat_completions_url`]: `http://h:8080` and `http://h:8080/v1/` are one
/// endpoint), without `/chat/completions`, credentials, query or fragment.
pub fn learned_key(base_url: &str, model: &str) -> Result<Endpoint, ConfigError> {
    Ok(endpoint_key(&chat_completions_url(base_url)?, model))
}

/// `Endpoint::new` strips the credentials, query and fragment.
fn endpoint_key(chat: &Url, model: &str) -> Endpoint {
    let mut base = chat.clone();
    let path = base.path().to_string();
    base.set_path(path.strip_suffix("/chat/completions").unwrap_or(&path));
    Endpoint::new(base.as_str(), model)
}

/// The `/chat/completions` URL for a configured base (the rule is in the module documentation).
pub fn chat_completions_url(base_url: &str) -> Result<Url, ConfigError> {
    let given = base_url.trim();
    let invalid = |reason: &str| ConfigError::InvalidBaseUrl {
        url: bounded(given),
        reason: reason.to_string(),
    };
    let mut url = Url::parse(given).map_err(|e| invalid(&format!("not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("must start with http:// or https://"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        // Do not echo the URL: it holds a credential.
        return Err(ConfigError::InvalidBaseUrl {
            url: "(hidden: it contains credentials)".into(),
            reason: "must not contain user:password@; give the key through api_key_env".into(),
        });
    }
    if url.fragment().is_some() {
        return Err(invalid("must not contain a #fragment"));
    }
    let path = url.path().trim_end_matches('/').to_string();
    let path = if path.ends_with("/chat/completions") {
        path
    } else if path.is_empty() {
        "/v1/chat/completions".to_string()
    } else {
        format!("{path}/chat/completions")
    };
    // The query (e.g. a gateway's `api-version=`) is kept.
    url.set_path(&path);
    Ok(url)
}

/// How long to wait before retry number `retries_used + 1`: exponential backoff from
/// [`RETRY_BASE_DELAY`] capped at [`RETRY_MAX_BACKOFF`], or the server's `Retry-After` when it
/// is longer. `None` (do not retry here) when the server asks for more than [`MAX_RETRY_WAIT`].
pub fn retry_wait(retries_used: u32, retry_after: Option<Duration>) -> Option<Duration> {
    let factor = 1u32.checked_shl(retries_used.min(16)).unwrap_or(u32::MAX);
    let backoff = min(RETRY_BASE_DELAY.saturating_mul(factor), RETRY_MAX_BACKOFF);
    match retry_after {
        Some(asked) if asked > MAX_RETRY_WAIT => None,
        Some(asked) => Some(max(asked, backoff)),
        None => Some(backoff),
    }
}

/// Parses a `Retry-After` value: delay-seconds or an HTTP-date (IMF-fixdate, RFC 9110). A date
/// in the past means no wait. Anything else is ignored (`None`).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // A huge number saturates instead of failing: it is still "longer than we wait".
        return Some(Duration::from_secs(
            value.parse::<u64>().unwrap_or(u64::MAX),
        ));
    }
    let at = parse_http_date(value)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`, the only form RFC 9110 lets senders use.
fn parse_http_date(value: &str) -> Option<SystemTime> {
    let rest = value.split_once(", ")?.1;
    let mut parts = rest.split(' ');
    let day: u8 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => time::Month::January,
        "Feb" => time::Month::February,
        "Mar" => time::Month::March,
        "Apr" => time::Month::April,
        "May" => time::Month::May,
        "Jun" => time::Month::June,
        "Jul" => time::Month::July,
        "Aug" => time::Month::August,
        "Sep" => time::Month::September,
        "Oct" => time::Month::October,
        "Nov" => time::Month::November,
        "Dec" => time::Month::December,
        _ => return None,
    };
    let year: i32 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':');
    let hour: u8 = hms.next()?.parse().ok()?;
    let minute: u8 = hms.next()?.parse().ok()?;
    let second: u8 = hms.next()?.parse().ok()?;
    if hms.next().is_some() || parts.next()? != "GMT" || parts.next().is_some() {
        return None;
    }
    let date = time::Date::from_calendar_date(year, month, day).ok()?;
    let clock = time::Time::from_hms(hour, minute, second).ok()?;
    let at = time::PrimitiveDateTime::new(date, clock).assume_utc();
    Some(SystemTime::from(at))
}

fn with_attempts(mut err: ModelError, attempts: u32) -> ModelError {
    if attempts > 1 {
        err.message
            .push_str(&format!(" (after {attempts} attempts)"));
    }
    err
}

fn status_message(status: StatusCode, excerpt: &str) -> String {
    let line = match status.canonical_reason() {
        Some(reason) => format!("HTTP {} {}", status.as_u16(), reason),
        None => format!("HTTP {}", status.as_u16()),
    };
    if excerpt.is_empty() {
        line
    } else {
        format!("{line}: {excerpt}")
    }
}

/// What the server said about an error: `error.message`, `error` as text, `message` or
/// `detail` from a JSON body, else the body as text; bounded and single-line.
fn error_excerpt(body: &[u8]) -> String {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(v) => json_error_text(&v).unwrap_or_else(|| v.to_string()),
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    bounded(&text)
}

fn json_error_text(v: &Value) -> Option<String> {
    let error = v.get("error");
    let candidates = [
        error.and_then(|e| e.get("message")),
        error.filter(|e| e.is_string()),
        v.get("message"),
        v.get("detail"),
    ];
    candidates
        .into_iter()
        .flatten()
        .find_map(|c| c.as_str().map(str::to_string))
}

/// One line, control characters removed, at most [`ERROR_EXCERPT_CHARS`] characters.
fn bounded(text: &str) -> String {
    use diag_core::text::{bounded_within, collapse_whitespace, controls_to_spaces};
    bounded_within(
        &collapse_whitespace(&controls_to_spaces(text)),
        ERROR_EXCERPT_CHARS,
    )
}

/// Removes anything that looks like a credential: the configured key itself, the token after
/// `Bearer` or `Basic`, and `sk-…` style keys (OpenAI, LiteLLM and most gateways use that prefix).
pub fn redact_secrets(text: &str, key: Option<&str>) -> String {
    let mut out = match key.map(str::trim).filter(|k| !k.is_empty()) {
        Some(k) => text.replace(k, "***"),
        None => text.to_string(),
    };
    out = redact_tokens(&out);
    out
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~' | '+' | '/' | '=')
}

fn redact_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut previous_word = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(is_token_char) {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let end = after.find(|c| !is_token_char(c)).unwrap_or(after.len());
        let token = &after[..end];
        let secret = previous_word.eq_ignore_ascii_case("bearer")
            || previous_word.eq_ignore_ascii_case("basic")
            || (token.starts_with("sk-") && token.len() >= 12);
        if secret && token != "***" {
            out.push_str("***");
        } else {
            out.push_str(token);
        }
        previous_word = token.to_string();
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut current = e;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

fn wire_message(m: &Message) -> Value {
    let text = || Value::String(m.content.clone().unwrap_or_default());
    match m.role {
        Role::System => json!({"role": "system", "content": text()}),
        Role::User => json!({"role": "user", "content": text()}),
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": text(),
        }),
        Role::Assistant => {
            let mut out = Map::new();
            out.insert("role".into(), Value::String("assistant".into()));
            // No text is `""`, beside tool calls too: llama.cpp's Python server refuses the
            // `null` OpenAI itself sends there ("Input should be a valid string") and chat
            // templates read `content` from every message, so it cannot be left out; OpenAI,
            // vLLM and Ollama take `""`.
            out.insert(
                "content".into(),
                Value::String(m.content.clone().unwrap_or_default()),
            );
            if !m.tool_calls.is_empty() {
                out.insert(
                    "tool_calls".into(),
                    Value::Array(m.tool_calls.iter().map(wire_tool_call).collect()),
                );
            }
            Value::Object(out)
        }
    }
}

fn wire_tool_call(call: &ToolCall) -> Value {
    // The wire form of arguments is a JSON text, as OpenAI defines it.
    let arguments = match &call.arguments {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    })
}

fn wire_tool(tool: &ToolSpec) -> Value {
    // Several servers refuse a function without a parameters schema.
    let parameters = if tool.parameters.is_null() {
        json!({"type": "object", "properties": {}})
    } else {
        tool.parameters.clone()
    };
    json!({
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": parameters,
        },
    })
}

/// Parses a `/chat/completions` answer leniently, as real servers send it:
/// - content `null`, `""` or absent → `None`; content as an array of text parts is joined;
/// - tool calls present → [`FinishReason::ToolCalls`] even when the server says `stop` (Ollama,
///   some llama.cpp builds); `length` and `content_filter` are kept as reported; a server that
///   says `tool_calls` without sending any gets [`FinishReason::Other`];
/// - tool-call `arguments` as a JSON text or as an object; an empty text means `{}`; a text
///   that itself encodes a JSON text (double-encoded) is decoded once more; a text that is not
///   JSON is a transient "malformed tool arguments" error, like a truncated answer, because
///   asking again usually yields a well-formed call, while handing the model's broken text
///   to a tool would only guess at what it meant;
/// - a tool call without an id gets `call_<index>`; the legacy `function_call` is read too;
/// - `usage` absent → `None` (`input_tokens`/`output_tokens` are accepted as aliases);
/// - `choices` absent or empty, a first choice without a message, or a body that is not JSON
///   (cut off, garbage) → transient "truncated or empty response";
/// - an `error` object in a 2xx answer is classified by its numeric code when it has one
///   (OpenRouter style), and is permanent otherwise.
pub fn parse_chat_completion(body: &[u8]) -> Result<ChatResponse, ModelError> {
    let truncated =
        |why: &str| ModelError::transient(format!("truncated or empty response: {why}"));
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(truncated("the body is empty"));
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| truncated(&format!("the body is not valid JSON ({e})")))?;
    let Some(top) = v.as_object() else {
        return Err(truncated("the body is not a JSON object"));
    };

    let choices = top.get("choices").and_then(Value::as_array);
    let Some(choice) = choices.and_then(|c| c.first()) else {
        if let Some(error) = top.get("error").filter(|e| !e.is_null()) {
            return Err(error_in_answer(error));
        }
        return Err(truncated("no choices"));
    };
    let Some(message) = choice.get("message").and_then(Value::as_object) else {
        return Err(truncated("the first choice has no message"));
    };

    let content = parse_content(message.get("content"))?;
    let mut tool_calls = match message.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => calls
            .iter()
            .enumerate()
            .map(|(i, c)| parse_tool_call(i, c))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(malformed("tool_calls is not a list")),
    };
    if tool_calls.is_empty() {
        if let Some(legacy) = message.get("function_call").filter(|f| f.is_object()) {
            tool_calls.push(parse_function(0, None, legacy)?);
        }
    }

    let reported = FinishReason::parse(choice.get("finish_reason").and_then(Value::as_str));
    let finish_reason = match (reported, tool_calls.is_empty()) {
        (FinishReason::Stop | FinishReason::Other, false) => FinishReason::ToolCalls,
        (FinishReason::ToolCalls, true) => FinishReason::Other,
        (reason, _) => reason,
    };

    Ok(ChatResponse {
        content,
        tool_calls,
        finish_reason,
        usage: parse_usage(top.get("usage")),
        structured_output: None,
    })
}

fn malformed(why: &str) -> ModelError {
    ModelError::transient(format!("malformed answer: {why}"))
}

fn error_in_answer(error: &Value) -> ModelError {
    let text =
        bounded(&json_error_text(&json!({ "error": error })).unwrap_or_else(|| error.to_string()));
    let code = ["code", "status"]
        .iter()
        .find_map(|k| error.get(*k).and_then(Value::as_u64))
        .filter(|c| (400..=599).contains(c));
    let mut err = match code {
        Some(code) => ModelError::from_status(
            code as u16,
            format!("the endpoint answered with error {code}: {text}"),
        ),
        None => ModelError::permanent(format!("the endpoint answered with an error: {text}")),
    };
    let full = json_error_text(&json!({ "error": error })).unwrap_or_default();
    if let Some((limit, prompt)) = wire::context_overflow(error, &full) {
        err.class = ErrorClass::ContextOverflow;
        err.context_tokens = limit;
        err.usage = prompt.map(|p| Usage {
            prompt_tokens: p,
            completion_tokens: 0,
        });
    }
    err
}

fn parse_content(content: Option<&Value>) -> Result<Option<String>, ModelError> {
    match content {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(parts)) => {
            let text: String = parts
                .iter()
                .filter_map(|p| match p {
                    Value::String(s) => Some(s.as_str()),
                    other => other.get("text").and_then(Value::as_str),
                })
                .collect();
            Ok((!text.is_empty()).then_some(text))
        }
        Some(_) => Err(malformed("content is neither text nor a list of parts")),
    }
}

fn parse_tool_call(index: usize, call: &Value) -> Result<ToolCall, ModelError> {
    let id = call.get("id").and_then(Value::as_str);
    let Some(function) = call.get("function").filter(|f| f.is_object()) else {
        return Err(malformed(&format!("tool call {index} has no function")));
    };
    parse_function(index, id, function)
}

fn parse_function(
    index: usize,
    id: Option<&str>,
    function: &Value,
) -> Result<ToolCall, ModelError> {
    let id = match id.map(str::trim).filter(|s| !s.is_empty()) {
        Some(id) => id.to_string(),
        None => format!("call_{index}"),
    };
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| malformed(&format!("tool call {id} has no function name")))?
        .to_string();
    let arguments = match function.get("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(text)) => parse_arguments_text(text).ok_or_else(|| {
            ModelError::transient(format!(
                "malformed tool arguments for call {id} ({}): not valid JSON",
                bounded(&name)
            ))
        })?,
        Some(other) => other.clone(),
    };
    Ok(ToolCall {
        id,
        name,
        arguments,
    })
}

fn parse_arguments_text(text: &str) -> Option<Value> {
    let text = text.trim();
    if text.is_empty() {
        return Some(Value::Object(Map::new()));
    }
    match serde_json::from_str::<Value>(text).ok()? {
        // Double-encoded by the server: decode once more when that yields an object.
        Value::String(inner) => match serde_json::from_str::<Value>(&inner) {
            Ok(obj @ Value::Object(_)) => Some(obj),
            _ => Some(Value::String(inner)),
        },
        value => Some(value),
    }
}

fn parse_usage(usage: Option<&Value>) -> Option<Usage> {
    let usage = usage?.as_object()?;
    let number = |keys: [&str; 2]| {
        keys.iter()
            .find_map(|k| usage.get(*k).and_then(Value::as_u64))
    };
    let prompt = number(["prompt_tokens", "input_tokens"]);
    let completion = number(["completion_tokens", "output_tokens"]);
    if prompt.is_none() && completion.is_none() {
        return None;
    }
    Some(Usage {
        prompt_tokens: prompt.unwrap_or(0),
        completion_tokens: completion.unwrap_or(0),
    })
}

#[cfg(test)]
mod tests;
