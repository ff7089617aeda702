//! `diag eval`: runs scenarios (`diag_scenario_v1`) through the real ask path with each
//! selected model, stores every run, scores it against the scenario's label and prints one
//! table per model (or `--json`, schema `diag.eval.v1`). `--record DIR` keeps each run as a
//! run file, so an eval is also a replayable suite; `--report-dir DIR` writes each run's report
//! and a Markdown summary.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::common::{interrupt_handler, runtime, write_json, write_text};
use super::progress::Progress;
use super::{CommandContext, CommandError, Exit};
use diag_ask::config::Config;
use diag_ask::replay::run_file_of;
use diag_ask::setup;
use diag_ask::{ask, AskOptions, AskRequest};
use diag_core::clock::Clock;
use diag_core::model::EndpointMemory;
use diag_core::store::Store;
use diag_eval::env::{ScenarioClock, ScenarioEnv};
use diag_eval::render::{self, file_part};
use diag_eval::scenario::{discover, Scenario};
use diag_eval::score::{aggregate, score_run, RunFigures};
use diag_eval::{
    assignment_label, facts_of, usage_of, EvalCell, EvalModel, EvalReport, EvalRun, EvalScenario,
    EVAL_JSON_SCHEMA,
};
use diag_report::Format;

/// Run incident scenarios with the configured model(s) and score every run.
///
/// Each scenario's environment (its logs, runbooks and, when it has metrics.om, a
/// Prometheus backfilled from it) is set up by diag and stopped at the end; the run clock
/// starts at the scenario's `now`. Exit 0 when the eval ran, whatever the runs scored
/// (--strict: 4 when a run did not reach a grounded root cause).
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Scenario folders (holding scenario.toml), or folders of them
    #[arg(required = true, value_name = "SCENARIO")]
    pub scenarios: Vec<PathBuf>,
    /// Use this configured model ([models.NAME]) for every agent; repeat to compare models
    /// (default: the configuration's own agent assignment)
    #[arg(long = "model", value_name = "NAME")]
    pub models: Vec<String>,
    /// Runs per scenario and model
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    /// Print a JSON document (schema diag.eval.v1) instead of tables
    #[arg(long)]
    pub json: bool,
    /// Write every run's run file (diag_run_v2) under DIR/<scenario>/, for diag replay DIR
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// Write every run's report under DIR/<scenario>/ and a summary DIR/eval.md (`--report`
    /// is still taken, hidden, as its old name)
    #[arg(long, value_name = "DIR", alias = "report")]
    pub report_dir: Option<PathBuf>,
    /// The format of the run reports
    #[arg(long, value_enum, default_value = "html", value_name = "FORMAT")]
    pub report_format: super::report_file::ReportFormat,
    /// Exit 4 when any run did not reach a grounded root cause (failed, fallen back, fooled,
    /// ungrounded, partial or missed)
    #[arg(long)]
    pub strict: bool,
}

fn make_dir(dir: &Path, flag: &str) -> Result<(), CommandError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        CommandError::usage(format!(
            "{flag} {}: cannot create the folder: {e}",
            dir.display()
        ))
    })
}

/// Everything an eval needs before its first run, each checked so that bad input fails
/// before any model is called.
struct Plan {
    config: Config,
    config_path: PathBuf,
    scenarios: Vec<Scenario>,
    /// `None`: the configuration's own assignment.
    models: Vec<Option<String>>,
}

fn plan(g: &CommandContext, args: &EvalArgs) -> Result<Plan, CommandError> {
    let found = discover(&args.scenarios)?;
    for (path, why) in &found.skipped {
        eprintln!("diag: warning: {}: {why}", path.display());
    }
    let mut scenarios: Vec<Scenario> = Vec::new();
    for d in found.dirs {
        let s = Scenario::load(&d)?;
        if let Some(other) = scenarios.iter().find(|o| o.id() == s.id()) {
            return Err(CommandError::usage(format!(
                "{}: scenario id `{}` is given twice (also {})",
                d.display(),
                s.id(),
                other.dir.display()
            )));
        }
        scenarios.push(s);
    }
    let loaded = g.config()?;
    let (config, config_path) = (loaded.config.clone(), loaded.path.clone());
    for name in &args.models {
        if !config.models.contains_key(name) {
            let known: Vec<&str> = config.models.keys().map(String::as_str).collect();
            return Err(CommandError::usage(format!(
                "--model {}: no [models.{}] in config {} (configured: {})",
                diag_core::text::one_line(name, 80),
                diag_core::text::one_line(name, 80),
                config_path.display(),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )));
        }
    }
    let mut models: Vec<Option<String>> = Vec::new();
    for m in &args.models {
        if !models.contains(&Some(m.clone())) {
            models.push(Some(m.clone()));
        }
    }
    if models.is_empty() {
        models.push(None);
    }
    // The models must be buildable (API key variables set, a model for every agent) before
    // any environment starts.
    for m in &models {
        let c = ScenarioEnv {
            tools: Default::default(),
            prometheus: None,
        }
        .config_for(&config, m.as_deref());
        setup::models(&c)
            .map_err(|e| CommandError::usage(format!("config {}: {e}", config_path.display())))?;
    }
    if let Some(d) = &args.record {
        make_dir(d, "--record")?;
    }
    if let Some(d) = &args.report_dir {
        make_dir(d, "--report-dir")?;
    }
    Ok(Plan {
        config,
        config_path,
        scenarios,
        models,
    })
}

pub fn cmd_eval(
    g: &CommandContext,
    args: &EvalArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let plan = plan(g, args)?;
    let store = g.store()?;
    let rt = runtime()?;
    let show_progress = g.show_progress(args.json);
    let report = rt.block_on(async {
        let cancel = CancellationToken::new();
        let on_ctrl_c = interrupt_handler(cancel.clone())?;
        let result = run_all(&plan, args, &store, &cancel, show_progress).await;
        on_ctrl_c.abort();
        result
    })?;
    if report.interrupted {
        let runs: usize = report
            .models
            .iter()
            .flat_map(|m| &m.scenarios)
            .map(|c| c.runs.len())
            .sum();
        return Err(CommandError::new(
            Exit::Interrupted,
            format!(
                "interrupted after {runs} run(s); they are stored (diag runs), a run cut short \
                 is FAILED (interrupted)"
            ),
        ));
    }
    if args.json {
        write_json(out, &report)?;
    } else {
        write_text(out, &render::tables(&report))?;
    }
    if let Some(dir) = &args.report_dir {
        let path = dir.join("eval.md");
        crate::output_file::write_output(&path, render::markdown(&report).as_bytes()).map_err(
            |e| CommandError::usage(format!("{}: cannot write the summary: {e}", path.display())),
        )?;
    }
    let total: u32 = report
        .models
        .iter()
        .flat_map(|m| &m.scenarios)
        .map(|c| c.aggregate.runs)
        .sum();
    if args.strict && report.not_grounded > 0 {
        return Err(CommandError::new(
            Exit::NotStrict,
            format!(
                "--strict: {} of {total} run(s) did not reach a grounded root cause",
                report.not_grounded
            ),
        ));
    }
    Ok(())
}

async fn run_all(
    plan: &Plan,
    args: &EvalArgs,
    store: &Store,
    cancel: &CancellationToken,
    show_progress: bool,
) -> Result<EvalReport, CommandError> {
    let mut models: Vec<EvalModel> = plan
        .models
        .iter()
        .map(|m| EvalModel {
            model: match m {
                Some(name) => name.clone(),
                None => assignment_label(&plan.config),
            },
            scenarios: Vec::new(),
        })
        .collect();
    let mut interrupted = false;
    // What each endpoint taught (the structured-output form it takes) holds for the whole
    // eval, starts from what the store remembers and is kept there, as for `diag ask`.
    let (endpoints, learnings) = super::live::remembered_endpoints(store);
    'scenarios: for scenario in &plan.scenarios {
        let env = match ScenarioEnv::start(scenario, Some(cancel)).await {
            Ok(env) => env,
            Err(diag_eval::env::EnvError::Interrupted { .. }) => {
                interrupted = true;
                break;
            }
            Err(e) => return Err(CommandError::usage(e.to_string())),
        };
        for (m, model) in plan.models.iter().enumerate() {
            let config = env.config_for(&plan.config, model.as_deref());
            let mut cell = EvalCell {
                scenario: scenario.id().to_string(),
                aggregate: aggregate(&[]),
                runs: Vec::new(),
            };
            let mut figures = Vec::new();
            for repeat in 1..=args.repeat {
                let done = run_one(
                    RunSpec {
                        scenario,
                        env: &env,
                        config: &config,
                        config_path: &plan.config_path,
                        model_label: &models[m].model,
                        repeat,
                        endpoints: &endpoints,
                    },
                    args,
                    store,
                    cancel,
                    show_progress,
                )
                .await;
                let (run, fig, cut) = match done {
                    Ok(x) => x,
                    Err(e) => {
                        env.stop().await;
                        return Err(e);
                    }
                };
                cell.runs.push(run);
                figures.push(fig);
                if cut {
                    interrupted = true;
                    cell.aggregate = aggregate(&figures);
                    models[m].scenarios.push(cell);
                    env.stop().await;
                    break 'scenarios;
                }
            }
            cell.aggregate = aggregate(&figures);
            models[m].scenarios.push(cell);
        }
        env.stop().await;
    }
    super::live::warn_unkept(&learnings);
    let not_grounded = models
        .iter()
        .flat_map(|m| &m.scenarios)
        .flat_map(|c| &c.runs)
        .filter(|r| !matches!(r.score.outcome, diag_eval::score::Outcome::Grounded))
        .count();
    Ok(EvalReport {
        schema: EVAL_JSON_SCHEMA,
        repeat: args.repeat,
        scenarios: plan
            .scenarios
            .iter()
            .map(|s| EvalScenario {
                id: s.id().to_string(),
                title: s.file.title.clone(),
                dir: s.dir.display().to_string(),
                question: s.file.question.clone(),
                now: s.now.to_string(),
            })
            .collect(),
        models,
        not_grounded: u32::try_from(not_grounded).unwrap_or(u32::MAX),
        interrupted,
    })
}

struct RunSpec<'a> {
    scenario: &'a Scenario,
    env: &'a ScenarioEnv,
    config: &'a Config,
    config_path: &'a Path,
    model_label: &'a str,
    repeat: u32,
    endpoints: &'a EndpointMemory,
}

/// One run through the ask service, then its score; `true` when it was interrupted.
async fn run_one(
    spec: RunSpec<'_>,
    args: &EvalArgs,
    store: &Store,
    cancel: &CancellationToken,
    show_progress: bool,
) -> Result<(EvalRun, RunFigures, bool), CommandError> {
    let _ = spec.env;
    let clock: Arc<dyn Clock> = Arc::new(ScenarioClock::new(spec.scenario.now));
    let live = setup::live_with(spec.config, clock.clone(), spec.endpoints)
        .await
        .map_err(|e| CommandError::usage(format!("config {}: {e}", spec.config_path.display())))?;
    let deps = diag_ask::live::live_deps(&live, clock, store);
    let question = spec.scenario.file.question.clone();
    let mut progress = Progress::new(show_progress);
    let outcome = ask(
        &deps,
        AskRequest {
            question: question.clone(),
            session_id: None,
            run_id: None,
        },
        AskOptions::new(&mut progress)
            .recording(args.record.is_some())
            .cancel(Some(cancel)),
    )
    .await;
    progress.finish();
    live.shutdown().await;
    let outcome = outcome.map_err(CommandError::from)?;
    for w in &outcome.warnings {
        let _ = writeln!(
            std::io::stderr(),
            "diag: warning: {}",
            diag_core::text::one_line(w, 300)
        );
    }
    let row = store
        .get_run(&outcome.run_id)
        .map_err(CommandError::from)?
        .ok_or_else(|| CommandError::new(Exit::Internal, "the run vanished from the store"))?;
    let steps: Vec<_> = store
        .agent_steps(&outcome.run_id)
        .map_err(CommandError::from)?
        .into_iter()
        .map(|s| s.step)
        .collect();
    let tool_calls = store
        .invocations(&outcome.run_id)
        .map_err(CommandError::from)?
        .len();
    let (prompt_tokens, completion_tokens, model_calls, cost) = usage_of(&steps, spec.config);
    let score = score_run(&spec.scenario.file.label, &facts_of(&outcome));
    let verdict = outcome
        .state
        .round
        .effective_verdict
        .filter(|_| {
            outcome.state.round.verifier_status == Some(diag_diagnosis::AgentStatus::Completed)
        })
        .map(|v| v.as_str().to_string());
    let stem = format!("{}-{}", file_part(spec.model_label), spec.repeat);
    let scenario_dir = file_part(spec.scenario.id());
    let mut record_file = None;
    if let (Some(dir), false) = (&args.record, outcome.interrupted()) {
        let folder = dir.join(&scenario_dir);
        make_dir(&folder, "--record")?;
        let path = folder.join(format!("{stem}.json"));
        let file = run_file_of(
            &outcome,
            &question,
            row.started_at,
            spec.config.limits,
            deps.tools.catalog(),
        );
        crate::output_file::write_output(&path, file.to_json().as_bytes()).map_err(|e| {
            CommandError::usage(format!(
                "{}: cannot write the run file: {e} (run {} is stored; diag export writes it)",
                path.display(),
                outcome.run_id
            ))
        })?;
        record_file = Some(path.display().to_string());
    }
    let mut report_file = None;
    if let Some(dir) = &args.report_dir {
        let folder = dir.join(&scenario_dir);
        make_dir(&folder, "--report-dir")?;
        let format = Format::from(args.report_format);
        let path = folder.join(format!("{stem}.{}", format.extension()));
        super::report_file::write_file(store, &outcome.run_id, format, &path)?;
        report_file = Some(path.display().to_string());
    }
    let wall_ms = row.duration_ms.unwrap_or(0);
    let run = EvalRun {
        repeat: spec.repeat,
        run_id: outcome.run_id.clone(),
        status: outcome.status().as_str().to_string(),
        failure: outcome.failure().map(str::to_string),
        effective_verdict: verdict.clone(),
        degraded: outcome.state.degraded,
        fallback_kind: outcome.state.fallback_kind.map(|k| k.as_str().to_string()),
        score: score.clone(),
        prompt_tokens,
        completion_tokens,
        model_calls,
        tool_calls: u64::try_from(tool_calls).unwrap_or(u64::MAX),
        wall_ms,
        cost,
        record_file,
        report_file,
    };
    let figures = RunFigures {
        score,
        verdict,
        tokens: prompt_tokens.saturating_add(completion_tokens),
        model_calls,
        wall_ms,
        cost,
    };
    Ok((run, figures, outcome.interrupted()))
}
