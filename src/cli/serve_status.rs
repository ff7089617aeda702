//! `diag serve status`: the queue of `diag serve` (diag-alerts' `status`), as a table or
//! `--json`. It only reads: nothing is claimed or swept.

use std::io::Write;

use super::common::{write_json, write_text};
use super::{CommandContext, CommandError};
use diag_alerts::status;
use diag_core::store::QueueCounts;

/// `diag serve status` (its flags are `serve::StatusArgs`): the table, or with `json` the
/// document.
pub fn cmd_status(g: &CommandContext, json: bool, out: &mut dyn Write) -> Result<(), CommandError> {
    // No store at the default path: nothing was ever queued on this machine.
    let (entries, counts) = match g.existing_store()? {
        Some(store) => (store.queue_entries()?, store.queue_counts()?),
        None => (Vec::new(), QueueCounts::default()),
    };
    if json {
        return write_json(out, &status::document(&entries, &counts));
    }
    write_text(out, &status::table(&entries, &counts))
}
