//! The exit codes of `diag`, in one place. Scripts read these; they never change meaning.

use std::process::ExitCode;

/// A documented process exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The command did what was asked (for `ask`: the run is SUCCESS).
    Success = 0,
    /// An unexpected internal error.
    Internal = 1,
    /// Bad usage, configuration or input.
    Usage = 2,
    /// The run ended FAILED.
    RunFailed = 3,
    /// `--strict`: the run succeeded but was degraded or its verdict was not PASS; for
    /// `eval --strict`, a run did not reach a grounded root cause.
    NotStrict = 4,
    /// `replay`: a run file did not reproduce its expected result; or, for `replay` and
    /// `ask --fixture`, the run left its recording (divergence). `ask --fixture` never
    /// compares with `expected`.
    ReplayMismatch = 5,
    /// The run store stayed locked by another writer past the busy timeout, or its server
    /// could not be reached: nothing was changed, and the same command may work when tried
    /// again.
    StoreUnavailable = 6,
    /// `ask`: the run asked its models and none ever answered (an endpoint never reached or
    /// refusing every request); the run is stored SUCCESS with the Fallback's answer, which
    /// is not a diagnosis.
    NoModelAnswered = 7,
    /// Interrupted (Ctrl-C); the run is stored FAILED with its partial trace.
    Interrupted = 130,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}
