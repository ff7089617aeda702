//! The model port: the [`ChatModel`] trait over `diag`'s own normalized chat types (which are
//! plain data in `diag-records`, re-exported here). Provider wire formats stay behind adapters
//! (the OpenAI-compatible one, the recorded one for replay), so the agent runtime never sees a
//! provider's quirks.

pub mod scripted;

pub mod memory;

pub use diag_records::endpoint::{Endpoint, Learned, RefusedSampling, SamplingParameter};
pub use diag_records::model::*;
pub use memory::{EndpointMemory, LearnedSink, StructuredOutputSetting};

pub type ChatFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<ChatResponse, ModelError>> + Send + 'a>,
>;

/// A chat model endpoint.
pub trait ChatModel: Send + Sync {
    /// The model name used in records (never a key or a URL with credentials).
    fn name(&self) -> &str;
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> ChatFuture<'a>;

    /// The model's context size in tokens, when known (configured, or learned from an
    /// earlier context-length error); the runtime fits requests to it.
    fn context_tokens(&self) -> Option<u32> {
        None
    }

    /// What the next request is fitted with: the context size, and no completion budget of
    /// its own (the agent's applies). A replay answers with what the recorded call used.
    fn request_limits(&self) -> RequestLimits {
        RequestLimits {
            context_tokens: self.context_tokens(),
            max_tokens: None,
        }
    }

    /// A request the runtime did not send because it cannot fit the context; `error` is what
    /// will be recorded. A live model has nothing to do; a replay takes the recorded exchange
    /// here, since the recording holds this call too.
    fn not_sent(&self, _request: &ChatRequest, error: ModelError) -> ModelError {
        error
    }

    /// Whether the Executor's evidence document is asked for in a turn of its own when its
    /// tool loop ends without one that meets the contract: a live model says so when it sends
    /// output contracts (`structured_output` other than `off`); a replay when the recording
    /// holds such a turn.
    fn evidence_turn(&self) -> bool {
        false
    }
}
