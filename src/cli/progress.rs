//! The live progress line of `diag ask`: one spinner naming the node that runs, and one
//! finished line per node attempt. Shown only on a terminal, and never with `--quiet`,
//! `--no-progress` or `--json`.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use diag_core::graph::{Event, NodeKind, Observer};
use diag_diagnosis::Status;

pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A visible spinner when stdout is a terminal and `show` holds; otherwise hidden.
    pub fn new(show: bool) -> Self {
        let bar = if show && std::io::stdout().is_terminal() {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        } else {
            ProgressBar::hidden()
        };
        Progress { bar }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Observer<Status> for Progress {
    fn node_started(&mut self, node: &str, _kind: NodeKind, attempt: u32, round: u32) {
        let retry = if attempt > 1 { " (retry)" } else { "" };
        self.bar
            .set_message(format!("{node}{retry}, round {round}"));
    }

    fn event(&mut self, event: &Event<Status>) {
        if !self.bar.is_hidden() {
            self.bar.println(format!(
                "  {:<15} {:<20} {} ms",
                event.node, event.status, event.duration_ms
            ));
        }
    }
}
