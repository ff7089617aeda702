//! `diag ask`: runs one diagnosis, live or from a recorded run file, stores it, and prints
//! the answer with its timeline (or `--json`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::common::{interrupt_handler, runtime, write_json, write_text};
use super::context::LoadedConfig;
use super::live::{load_run_file, remembered_endpoints, warn_unkept};
use super::progress::Progress;
use super::{CommandContext, CommandError, Exit};
use diag_ask::live::{
    check_session, live_deps, model_calls, quiet_verdict_line, shown_verdict, ModelCalls,
};
use diag_ask::replay::{divergence_of, replay_deps, run_file_of};
use diag_ask::setup;
use diag_ask::setup::RandomIds;
use diag_ask::{ask, AskDeps, AskOptions, AskOutcome, AskRequest, Resume};
use diag_core::clock::{Clock, StartingClock, SystemClock, Timestamp};
use diag_core::limits::Limits;
use diag_core::protocol::Verdict;
use diag_core::store::RunStatus;
use diag_core::store::Store;
use diag_report::terminal as render;
use diag_runfile::resume::{resumed_models, ResumedTools, Reusing};
use diag_runfile::{Divergence, RunFile};

/// The schema name of `diag ask --json` output.
pub const ASK_JSON_SCHEMA: &str = "diag.ask.v2";

/// Run one diagnosis and print the answer with its timeline.
///
/// Live runs use the model endpoints and tools of the configuration file. With --fixture,
/// model responses and tool outputs come from a recorded run file instead, offline.
#[derive(Debug, Args)]
pub struct AskArgs {
    /// The question; with --fixture, omit it or give the file's own (another question is
    /// refused: the recording answers only its own)
    pub question: Option<String>,
    /// Serve model responses and tool outputs from this run file instead of live endpoints
    #[arg(long, value_name = "FILE")]
    pub fixture: Option<PathBuf>,
    /// Continue this session (a new one is created otherwise)
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Also write the run as a run file (diag_run_v2) for replay
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Also write a report of the run to FILE: HTML for .html, Markdown for .md (see diag
    /// report)
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Print a JSON document (schema diag.ask.v2) instead of text
    #[arg(long)]
    pub json: bool,
    /// Exit 4 when the run succeeded but was degraded or its verdict was not PASS
    #[arg(long)]
    pub strict: bool,
    /// Continue a run that ended FAILED, as a new run: its stored model and tool calls are
    /// reused in order (checked as replay checks them) until they run out or diverge, then the
    /// run goes on live. Takes that run's question and session: give no question
    #[arg(long, value_name = "RUN_ID", conflicts_with_all = ["fixture", "session"])]
    pub resume: Option<String>,
    /// Run as if asked at TIME (RFC 3339, any offset; kept in UTC), for an incident in the
    /// past: the run's start time, the "now" every agent is shown and the tools' default time
    /// all start there. Refused when TIME lies in the future
    #[arg(long, value_name = "TIME", conflicts_with_all = ["fixture", "resume"])]
    pub at: Option<String>,
}

/// The instant `--at` names, checked against the real clock: refused (usage, exit 2) when it
/// is not an RFC 3339 time or lies in the future.
fn pinned_start(at: &str, real: &dyn Clock) -> Result<Timestamp, CommandError> {
    let t = Timestamp::parse_rfc3339(at.trim()).map_err(|e| {
        CommandError::usage(format!(
            "--at {}: not an RFC 3339 time ({e}), e.g. 2026-11-30T14:11:00Z",
            render::one_line(at, 80)
        ))
    })?;
    let now = real.now();
    if t > now {
        return Err(CommandError::usage(format!(
            "--at {t}: lies in the future (the clock reads {now}); --at pins a run to a past \
             instant"
        )));
    }
    Ok(t)
}

enum Source<'a> {
    Fixture(Box<RunFile>),
    Live(&'a LoadedConfig),
}

/// Opens the store a live run would use and reads the run `--resume` names (as its run
/// file: id, question, session, stored exchanges), refusing (with nothing written) an
/// unknown run, one that ended SUCCESS and one still RUNNING.
fn resumable(g: &CommandContext, run_id: &str) -> Result<(Store, RunFile), CommandError> {
    let Some(store) = g.store_with_runs()? else {
        return Err(CommandError::unknown_run(run_id));
    };
    let row = store
        .get_run(run_id)
        .map_err(CommandError::from)?
        .ok_or_else(|| CommandError::unknown_run(run_id))?;
    match row.status {
        RunStatus::Failed => {}
        RunStatus::Success => {
            return Err(CommandError::usage(format!(
                "run {} ended SUCCESS: only a FAILED run can be resumed",
                row.run_id
            )))
        }
        RunStatus::Running => {
            return Err(CommandError::usage(format!(
                "run {} is still RUNNING (its process may still be working on it): only a \
                 FAILED run can be resumed",
                row.run_id
            )))
        }
    }
    let run = diag_runfile::export::from_store(&store, &row.run_id)?;
    Ok((store, run))
}

/// Refuses a `--record` path that can never be written (a folder, or a file in a folder
/// that does not exist) before a live run spends time and tokens on it.
fn check_record_path(path: &std::path::Path) -> Result<(), CommandError> {
    let name = path.display();
    if path.is_dir() {
        return Err(CommandError::usage(format!(
            "{name}: cannot write the run file: it is a folder"
        )));
    }
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if !parent.is_dir() {
        return Err(CommandError::usage(format!(
            "{name}: cannot write the run file: the folder {} does not exist",
            parent.display()
        )));
    }
    Ok(())
}

pub fn cmd_ask(
    g: &CommandContext,
    args: &AskArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    if args
        .question
        .as_deref()
        .is_some_and(|q| q.trim().is_empty())
    {
        return Err(CommandError::usage("the question is empty"));
    }
    if let Some(session) = &args.session {
        check_session(session).map_err(|e| CommandError::usage(format!("--session {e}")))?;
    }
    let pinned = args
        .at
        .as_deref()
        .map(|at| pinned_start(at, &SystemClock::new()))
        .transpose()?;
    if let (Some(run_id), Some(_)) = (&args.resume, &args.question) {
        // The resumed run answers the original question only: its stored calls are about it.
        return Err(CommandError::usage(format!(
            "--resume {} continues that run with its own question: omit the question",
            render::one_line(run_id, 80)
        )));
    }
    let source = match &args.fixture {
        Some(path) => Source::Fixture(Box::new(load_run_file(path)?)),
        None => Source::Live(g.config()?),
    };
    let question = match (&args.question, &source) {
        // A recording answers its own question only: another question would be answered
        // with the recorded answers as if they were about it.
        (Some(q), Source::Fixture(run)) if q.trim() != run.question.trim() => {
            return Err(CommandError::usage(format!(
                "{} records the question \"{}\", not this one: omit the question or give \
                 the recorded one",
                args.fixture.as_deref().unwrap_or(Path::new("")).display(),
                render::one_line(run.question.trim(), 200)
            )))
        }
        (Some(_) | None, Source::Fixture(run)) => run.question.clone(),
        (Some(q), Source::Live(..)) => q.clone(),
        (None, Source::Live(..)) if args.resume.is_some() => String::new(),
        (None, Source::Live(..)) => {
            return Err(CommandError::usage(
                "a question is required, e.g. diag ask \"why does checkout return 502?\"",
            ))
        }
    };
    if question.trim().is_empty() && args.resume.is_none() {
        return Err(CommandError::usage("the question is empty"));
    }
    if let Some(path) = &args.record {
        check_record_path(path)?;
    }
    if let Some(path) = &args.report {
        super::report_file::format_for(None, Some(path), "--report")?;
        super::report_file::check_output_path(path, "report")?;
    }
    let (store, resuming) = match (&source, &args.resume) {
        (Source::Live(..), Some(run_id)) => {
            let (store, resuming) = resumable(g, run_id)?;
            (store, Some(resuming))
        }
        (Source::Live(..), None) | (Source::Fixture(_), _) => (g.store()?, None),
    };
    let question = match &resuming {
        Some(r) => r.question.clone(),
        None => question,
    };
    let rt = runtime()?;
    let show_progress = g.show_progress(args.json);
    let limits = match &source {
        Source::Fixture(run) => run.limits(),
        Source::Live(c) => c.config.limits,
    };
    let reusing = resuming
        .as_ref()
        .map(|r| Reusing::new(r.exchanges.clone(), r.tools.clone()));
    rt.block_on(async {
        let (deps, tape, env, learnings) = match source {
            Source::Fixture(run) => {
                let (deps, tape) = replay_deps(&run, &store, Arc::new(RandomIds));
                (deps, Some((tape, run)), None, None)
            }
            Source::Live(LoadedConfig { config, path, .. }) => {
                // A pinned run (`--at`) starts its clock there; a resumed run starts where the
                // run it continues started, so its agents see the same clock and its stored
                // calls are reused; otherwise the real clock.
                let start = pinned.or_else(|| resuming.as_ref().map(|r| r.started_at));
                let clock: Arc<dyn Clock> = match start {
                    Some(start) => Arc::new(StartingClock::new(start)),
                    None => Arc::new(SystemClock::new()),
                };
                // What the endpoints taught earlier processes, and kept for later ones.
                let (memory, learnings) = remembered_endpoints(&store);
                let env = setup::live_with(config, clock.clone(), &memory)
                    .await
                    .map_err(|e| super::live::setup_error(path, &e, true))?;
                let mut deps = live_deps(&env, clock, &store);
                if let Some(r) = &reusing {
                    deps.models = resumed_models(&deps.models, r);
                    deps.tools = Arc::new(ResumedTools {
                        reusing: r.clone(),
                        live: deps.tools.clone(),
                    });
                }
                (deps, None, Some(env), Some(learnings))
            }
        };
        let tally = reusing.as_ref().map(|r| {
            let r = r.clone();
            move || r.reuse()
        });
        let resume = match (&resuming, &tally) {
            (Some(from), Some(tally)) => Some(Resume {
                from: from.run_id.clone(),
                reuse: tally,
            }),
            _ => None,
        };
        let session = match &resuming {
            Some(r) => Some(r.session_id.clone()),
            None => args.session.clone(),
        };
        let result = run_ask(&deps, args, &question, session, resume, show_progress).await;
        if let Some(env) = env {
            env.shutdown().await;
        }
        if let Some(learnings) = &learnings {
            warn_unkept(learnings);
        }
        let outcome = result?;
        if let (Some(r), Some(from)) = (&reusing, &resuming) {
            if let Some(stop) = r.stop().filter(|s| s.divergence) {
                let _ = writeln!(
                    std::io::stderr(),
                    "diag: resume of run {} diverged at {}; reuse stopped there and the run went \
                     on live",
                    from.run_id,
                    render::one_line(&stop.at.to_string(), 300)
                );
            }
        }
        let divergence = tape
            .as_ref()
            .and_then(|(tape, run)| divergence_of(run, tape, &store, &outcome.run_id));
        finish(
            Finished {
                g,
                args,
                deps: &deps,
                store: &store,
                replaying: Replaying {
                    fixture: tape.is_some(),
                    divergence,
                },
                limits,
                question: &question,
                outcome: &outcome,
            },
            out,
        )
    })
}

async fn run_ask(
    deps: &AskDeps,
    args: &AskArgs,
    question: &str,
    session: Option<String>,
    resume: Option<Resume<'_>>,
    show_progress: bool,
) -> Result<AskOutcome, CommandError> {
    let cancel = CancellationToken::new();
    let on_ctrl_c = interrupt_handler(cancel.clone())?;
    let mut progress = Progress::new(show_progress);
    let outcome = ask(
        deps,
        AskRequest {
            question: question.to_string(),
            session_id: session,
            run_id: None,
        },
        AskOptions::new(&mut progress)
            .recording(args.record.is_some())
            .resuming(resume)
            .cancel(Some(&cancel)),
    )
    .await;
    progress.finish();
    on_ctrl_c.abort();
    outcome.map_err(CommandError::from)
}

/// Whether the run replayed a `--fixture` file, and where it left that recording.
struct Replaying {
    fixture: bool,
    divergence: Option<Divergence>,
}

/// A finished `diag ask`: what it was asked, how it ran and what it came to.
struct Finished<'a> {
    g: &'a CommandContext,
    args: &'a AskArgs,
    deps: &'a AskDeps,
    store: &'a Store,
    replaying: Replaying,
    /// The limits the run ran under (the configuration's, or the fixture's).
    limits: Limits,
    question: &'a str,
    outcome: &'a AskOutcome,
}

/// Writes a finished run's output (JSON, quiet or the full text), then its run file and
/// report, and returns the exit the run calls for.
fn finish(run: Finished<'_>, out: &mut dyn Write) -> Result<(), CommandError> {
    let Finished {
        g,
        args,
        deps,
        store,
        replaying,
        limits,
        question,
        outcome,
    } = run;
    let row = store
        .get_run(&outcome.run_id)
        .map_err(CommandError::from)?
        .ok_or_else(|| CommandError::new(Exit::Internal, "the run vanished from the store"))?;
    let verdict = shown_verdict(outcome);
    let calls = model_calls(store, &outcome.run_id);
    if args.json {
        write_json(
            out,
            &json!({
                "schema": ASK_JSON_SCHEMA,
                "run_id": outcome.run_id,
                "session_id": outcome.session_id,
                "status": outcome.status().as_str(),
                "answer": outcome.answer(),
                "failure": outcome.failure(),
                "effective_verdict": verdict.map(|v| v.as_str()),
                "degraded": outcome.state.degraded,
                "fallback_kind": outcome.state.fallback_kind.map(|k| k.as_str()),
                "model_error": calls.first_error,
                "model_answered": !calls.none_answered(),
                "events": outcome.state.events,
                "evaluation": outcome.evaluation(),
            }),
        )?;
    } else if g.quiet() {
        // Only the answer, for scripts: no heading; nothing for a FAILED run (stderr says why).
        if let Some(answer) = outcome.answer() {
            let text = diag_diagnosis::render_answer(answer);
            write_text(out, &format!("{}\n", text.trim_end()))?;
            // Quiet never hides trust: an answer that is not a verified PASS says so on
            // stderr, so stdout stays the answer alone.
            if let Some(line) = quiet_verdict_line(outcome, verdict) {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
        }
    } else {
        let invocations = store
            .invocations(&outcome.run_id)
            .map_err(CommandError::from)?;
        let text = [
            render::header(&render::Header {
                run_id: &outcome.run_id,
                session_id: &outcome.session_id,
                status: outcome.status().as_str(),
                question,
                started_at: row.started_at.to_string(),
                duration_ms: row.duration_ms,
                effective_verdict: verdict.map(|v| v.as_str()),
                degraded: outcome.state.degraded,
                failure: outcome.failure(),
            }),
            render::timeline(&outcome.state.events),
            render::invocations(&invocations),
            render::refused_bindings(outcome.state.round.gatekeeper_raw.as_ref(), &invocations),
            render::answer(outcome.answer()),
        ]
        .into_iter()
        .filter(|block| !block.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
        write_text(out, &text)?;
    }

    // Written after the output, so a run file that cannot be written never hides the
    // answer; the run itself is stored either way.
    let record_error = args.record.as_ref().and_then(|path| {
        let file = run_file_of(
            outcome,
            question,
            row.started_at,
            limits,
            deps.tools.catalog(),
        );
        crate::output_file::write_output(path, file.to_json().as_bytes())
            .err()
            .map(|e| {
                CommandError::usage(format!(
                    "{}: cannot write the run file: {e} (run {} is stored; diag export {} -o FILE \
                 writes it)",
                    path.display(),
                    outcome.run_id,
                    outcome.run_id
                ))
            })
    });

    let ended = outcome.status() != RunStatus::Failed && !outcome.interrupted();
    let failed_calls = failed_model_calls(!replaying.fixture, ended, &calls);
    if let FailedCalls::Warning(message) = failed_calls {
        let _ = writeln!(
            std::io::stderr(),
            "diag: warning: model call failed: {message}"
        );
    }
    let unreachable = match failed_calls {
        FailedCalls::NoneAnswered(first) => Some(first),
        _ => None,
    };
    for w in &outcome.warnings {
        let _ = writeln!(
            std::io::stderr(),
            "diag: warning: {}",
            render::one_line(w, 300)
        );
    }
    // The report is written like the run file: after the output, from the stored run.
    let report_error = args.report.as_ref().and_then(|path| {
        let format = super::report_file::format_for(None, Some(path), "--report").ok()?;
        super::report_file::write_file(store, &outcome.run_id, format, path)
            .err()
            .map(|e| {
                e.hint(format!(
                    "run {} is stored; diag report {} -o FILE writes it",
                    outcome.run_id, outcome.run_id
                ))
            })
    });
    // The run's own outcome decides the exit code; a run file or report that could not be
    // written still gets its line.
    let mut errors: Vec<CommandError> = [
        outcome_error(
            args,
            replaying.divergence.as_ref(),
            unreachable,
            outcome,
            verdict,
        ),
        record_error,
        report_error,
    ]
    .into_iter()
    .flatten()
    .collect();
    if errors.is_empty() {
        return Ok(());
    }
    let first = errors.remove(0);
    for e in errors {
        let _ = writeln!(std::io::stderr(), "diag: {e}");
    }
    Err(first)
}

/// What a run's failed model calls are worth on stderr.
#[derive(Debug, PartialEq)]
enum FailedCalls<'a> {
    /// None failed, or the run replayed a fixture (its errors are part of its recording; a
    /// divergence gets its own line).
    Silent,
    /// A live endpoint failed: one warning line even when a Fallback answered, as it is
    /// usually a configuration problem the operator can fix.
    Warning(&'a str),
    /// A live run that ended (not FAILED, not interrupted) asked its models and none ever
    /// answered: the exit's own line (exit 7) names the first failure instead.
    NoneAnswered(&'a str),
}

/// Classifies a run's failed model calls. A FAILED or interrupted run keeps the warning: its
/// exit's line names the failure, not the endpoint.
fn failed_model_calls(live: bool, ended: bool, calls: &ModelCalls) -> FailedCalls<'_> {
    match calls.first_error.as_deref() {
        Some(first) if live && ended && calls.none_answered() => FailedCalls::NoneAnswered(first),
        Some(first) if live => FailedCalls::Warning(first),
        _ => FailedCalls::Silent,
    }
}

/// The exit a finished run calls for, most specific first: divergence from a fixture,
/// interruption, FAILED, no model answered (`unreachable`: the first failed call), then
/// `--strict`.
fn outcome_error(
    args: &AskArgs,
    divergence: Option<&Divergence>,
    unreachable: Option<&str>,
    outcome: &AskOutcome,
    verdict: Option<Verdict>,
) -> Option<CommandError> {
    if let Some(d) = divergence {
        return Some(CommandError::new(
            Exit::ReplayMismatch,
            format!("the run left its recording at {d}"),
        ));
    }
    if outcome.interrupted() {
        return Some(CommandError::new(
            Exit::Interrupted,
            format!(
                "interrupted; run {} is stored as FAILED with its partial trace",
                outcome.run_id
            ),
        ));
    }
    if outcome.status() == RunStatus::Failed {
        return Some(CommandError::new(
            Exit::RunFailed,
            format!(
                "run {} FAILED: {}",
                outcome.run_id,
                outcome.failure().unwrap_or("unknown failure")
            ),
        ));
    }
    if let Some(first) = unreachable {
        return Some(CommandError::new(
            Exit::NoModelAnswered,
            format!(
                "no model answered: {first}; run {} holds the Fallback's answer, not a \
                 diagnosis (check the endpoint under [models] in the configuration)",
                outcome.run_id
            ),
        ));
    }
    if args.strict && (outcome.state.degraded || verdict != Some(Verdict::Pass)) {
        return Some(CommandError::new(
            Exit::NotStrict,
            format!(
                "--strict: run {} is {}",
                outcome.run_id,
                if outcome.state.degraded {
                    "degraded (a Fallback answered)".to_string()
                } else {
                    format!(
                        "{} rather than PASS",
                        verdict.map_or("without a verdict", |v| v.as_str())
                    )
                }
            ),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(made: usize, answered: usize, first_error: Option<&str>) -> ModelCalls {
        ModelCalls {
            made,
            answered,
            first_error: first_error.map(str::to_string),
        }
    }

    #[test]
    fn a_run_no_model_answered_is_told_apart_unless_it_failed_or_replayed() {
        let refused = "planner (transient) at http://127.0.0.1:9/v1, model m: cannot connect";
        let none = calls(3, 0, Some(refused));
        assert_eq!(
            failed_model_calls(true, true, &none),
            FailedCalls::NoneAnswered(refused)
        );
        // A FAILED or interrupted run exits with its own line; the endpoint stays named.
        assert_eq!(
            failed_model_calls(true, false, &none),
            FailedCalls::Warning(refused)
        );
        // Some calls answered: a warning, whether the run ended or not.
        let some = calls(3, 1, Some(refused));
        assert_eq!(
            failed_model_calls(true, true, &some),
            FailedCalls::Warning(refused)
        );
        // A fixture's failed calls are its recording.
        assert_eq!(failed_model_calls(false, true, &none), FailedCalls::Silent);
        assert_eq!(
            failed_model_calls(true, true, &calls(3, 3, None)),
            FailedCalls::Silent
        );
        assert_eq!(
            failed_model_calls(true, true, &calls(0, 0, None)),
            FailedCalls::Silent
        );
    }
}
