//! `diag investigate alertmanager`: reads the firing alerts from Alertmanager's API v2,
//! groups them as Alertmanager does, and runs one diagnosis per group that was not
//! investigated yet (openspec/specs/alerts/spec.md).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};
use tokio_util::sync::CancellationToken;

use super::common::{
    interrupt_handler, parse_duration_arg, runtime, write_json, write_text, DurationArg,
};
use super::context::LoadedConfig;
use super::live::{remembered_endpoints, warn_unkept};
use super::report_file::ReportFormat;
use super::{CommandContext, CommandError, Exit};
use diag_alerts::alertmanager::{AlertQuery, Alertmanager, Credentials};
use diag_alerts::batch::{self, BatchEnd};
use diag_alerts::secrets::notify_target;
use diag_ask::live::live_deps;
use diag_ask::setup;
use diag_core::alert::{group_alerts, ApiState};
use diag_core::clock::{Clock, SystemClock};
use diag_core::text::one_line;
use diag_report::Format;

/// Investigate alerts: one verified diagnosis per alert group.
#[derive(Debug, Args)]
pub struct InvestigateArgs {
    #[command(subcommand)]
    pub source: InvestigateSource,
}

#[derive(Debug, Subcommand)]
pub enum InvestigateSource {
    /// Read the firing alerts from Alertmanager's API v2 and investigate each group once.
    ///
    /// Exit codes for many runs: 0 when every run is SUCCESS (or there was nothing to
    /// investigate); 3 when any run ended FAILED; 4 under --strict when any run was degraded
    /// or not PASS; 130 when interrupted (the runs in flight are stored FAILED); 2 when the
    /// Alertmanager cannot be read (nothing is run or stored).
    Alertmanager(AlertmanagerArgs),
}

#[derive(Debug, Args)]
pub struct AlertmanagerArgs {
    /// Alertmanager's root URL, e.g. http://127.0.0.1:9093. Behind a proxy that asks for
    /// credentials, set DIAG_ALERTMANAGER_TOKEN (a bearer token) or DIAG_ALERTMANAGER_USER and
    /// DIAG_ALERTMANAGER_PASSWORD (basic auth); they are never printed or stored
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// Only the alerts this matcher selects, as Alertmanager takes it (alertname="X",
    /// service=~"check.*", env!="dev"); repeat for several (all must match)
    #[arg(long = "filter", value_name = "MATCHER")]
    pub filters: Vec<String>,
    /// Also investigate silenced alerts
    #[arg(long)]
    pub silenced: bool,
    /// Also investigate inhibited alerts
    #[arg(long)]
    pub inhibited: bool,
    /// Group alerts by these labels (repeat, or comma-separate) [default: alertname, service,
    /// job]
    #[arg(long = "group-by", value_name = "LABEL", value_delimiter = ',')]
    pub group_by: Vec<String>,
    /// How far before the first alert of a group started its question looks (30m, 1h, 90s)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg,
          default_value_t = DurationArg(diag_core::alert::DEFAULT_LOOKBACK))]
    pub lookback: DurationArg,
    /// Investigate a group again even when a finished run already investigated it
    #[arg(long)]
    pub again: bool,
    /// How many groups are investigated at once
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: u32,
    /// Also write each run's report into this folder, as RUN_ID.html (or .md with --report-format md)
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,
    /// The format of --report-dir's reports (`--format` is still taken, hidden, as its old
    /// name)
    #[arg(
        long,
        value_enum,
        default_value = "html",
        requires = "report_dir",
        alias = "format"
    )]
    pub report_format: ReportFormat,
    /// Print a JSON document (schema diag.investigate.v1) instead of a table
    #[arg(long)]
    pub json: bool,
    /// Exit 4 when a run succeeded but was degraded or its verdict was not PASS
    #[arg(long)]
    pub strict: bool,
}

pub fn cmd_investigate(
    g: &CommandContext,
    args: &InvestigateArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    match &args.source {
        InvestigateSource::Alertmanager(a) => cmd_alertmanager(g, a, out),
    }
}

fn cmd_alertmanager(
    g: &CommandContext,
    args: &AlertmanagerArgs,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let by = batch::group_labels(&args.group_by).map_err(CommandError::usage)?;
    let credentials = Credentials::from_env().map_err(CommandError::usage)?;
    let am = Alertmanager::new(&args.url)
        .map_err(|e| CommandError::usage(e.to_string()))?
        .with_credentials(credentials);
    if let Some(dir) = &args.report_dir {
        if !dir.is_dir() {
            return Err(CommandError::usage(format!(
                "--report-dir {}: not a folder",
                dir.display()
            )));
        }
    }
    let LoadedConfig {
        config,
        alerts,
        path,
    } = g.config()?;
    let notify = notify_target(alerts, None)?;
    // A configuration that cannot run a diagnosis is refused before Alertmanager is asked.
    diag_ask::setup::models(config).map_err(|e| super::live::setup_error(path, &e, false))?;
    let rt = runtime()?;
    let query = AlertQuery {
        filters: args.filters.clone(),
        silenced: args.silenced,
        inhibited: args.inhibited,
    };
    // The alerts are read before anything is opened or stored: an Alertmanager that cannot
    // be read leaves no trace.
    let listed = rt
        .block_on(am.alerts(&query))
        .map_err(|e| CommandError::usage(e.to_string()))?;
    let alerts: Vec<_> = listed
        .into_iter()
        .filter(|l| match l.state {
            ApiState::Active | ApiState::Unprocessed => true,
            ApiState::Suppressed {
                silenced,
                inhibited,
            } => (silenced && args.silenced) || (inhibited && args.inhibited),
        })
        .map(|l| l.alert)
        .collect();
    let alert_count = alerts.len();
    let store = g.store()?;
    let (mut rows, to_run) = batch::plan(
        &store,
        group_alerts(alerts, &by),
        args.lookback.0,
        args.again,
    )?;

    let show_progress = g.show_progress(args.json);
    let interrupted = rt.block_on(async {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let (memory, learnings) = remembered_endpoints(&store);
        let env = setup::live_with(config, clock.clone(), &memory)
            .await
            .map_err(|e| super::live::setup_error(path, &e, false))?;
        let deps = live_deps(&env, clock, &store);
        let cancel = CancellationToken::new();
        let on_ctrl_c = interrupt_handler(cancel.clone())?;
        let runs = batch::Runs {
            deps: &deps,
            lookback: args.lookback.0,
            jobs: args.jobs as usize,
            notify: notify.as_ref(),
            cancel: &cancel,
        };
        let ran = batch::run(runs, &mut rows, to_run, |group, outcome| {
            if show_progress {
                let line = match outcome {
                    Ok(o) => format!(
                        "diag: {} → run {} {}",
                        group.title(),
                        o.run_id,
                        o.status.as_str()
                    ),
                    Err(e) => format!("diag: {} → {e}", group.title()),
                };
                let _ = writeln!(std::io::stderr(), "{}", one_line(&line, 300));
            }
        })
        .await;
        on_ctrl_c.abort();
        env.shutdown().await;
        warn_unkept(&learnings);
        ran?;
        Ok::<bool, CommandError>(cancel.is_cancelled())
    })?;

    if let Some(dir) = &args.report_dir {
        let format: Format = args.report_format.into();
        for r in rows.iter_mut().filter(|r| r.investigated()) {
            let Some(run_id) = &r.run_id else { continue };
            let file = dir.join(format!("{run_id}.{}", format.extension()));
            match super::report_file::write_file(&store, run_id, format, &file) {
                Ok(_) => r.report = Some(file),
                Err(e) => r.warnings.push(e.to_string()),
            }
        }
    }
    for r in &rows {
        for w in &r.warnings {
            let _ = writeln!(std::io::stderr(), "diag: warning: {}", one_line(w, 300));
        }
    }
    if args.json {
        let doc = batch::InvestigateDoc::new(am.url(), alert_count, &rows, interrupted);
        write_json(out, &doc)?;
    } else {
        write_text(out, &batch::table(&rows, alert_count, &am.url()))?;
    }
    match batch::end(&rows, interrupted, args.strict) {
        None => Ok(()),
        Some(BatchEnd::Interrupted(m)) => Err(CommandError::new(Exit::Interrupted, m)),
        Some(BatchEnd::Failed(m)) => Err(CommandError::new(Exit::RunFailed, m)),
        Some(BatchEnd::NotStrict(m)) => Err(CommandError::new(Exit::NotStrict, m)),
    }
}
