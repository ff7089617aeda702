//! The lease of this process's RUNNING runs (`diag-owner`): a run is created with a lease
//! until `now + lease`, and while the store handle lives a background thread renews the
//! leases of every RUNNING run this process owns, every third of the lease. A process that
//! is killed stops renewing, so another process, on another host included, can tell its runs
//! are interrupted once their lease has run out.
//!
//! The thread starts with the handle's first run and holds the store only weakly: it ends
//! when the last handle is dropped (its channel closes), never keeping the store open.

use std::sync::{Arc, Weak};
use std::time::Duration;

use rusqlite::params;

use super::{Shared, SqliteStore};
use crate::clock::Timestamp;
use diag_owner::{Heartbeat, Owner};

/// Starts the heartbeat of one store handle: it renews the handle's RUNNING runs and ends
/// with the last handle (`diag_owner::Heartbeat`).
fn start(shared: Weak<Shared>, lease: Duration) -> Option<Heartbeat> {
    Heartbeat::start(lease, move || {
        let Some(shared) = shared.upgrade() else {
            return false;
        };
        if let Err(e) = (SqliteStore { shared }).renew_leases() {
            tracing::warn!(error = %e, "run leases not renewed this time");
        }
        true
    })
    .map_err(|e| tracing::warn!(error = %e, "cannot start the lease heartbeat"))
    .ok()
}

impl SqliteStore {
    /// When a lease taken or renewed at `now` runs out.
    pub(crate) fn lease_expiry(&self, now: Timestamp) -> String {
        diag_core::store::lease_expiry(now, self.shared.lease).to_string()
    }

    /// Starts the heartbeat of this handle, once.
    pub(crate) fn start_heartbeat(&self) {
        self.shared
            .heartbeat
            .get_or_init(|| start(Arc::downgrade(&self.shared), self.shared.lease));
    }

    /// Moves the lease of every RUNNING run this process owns to `now + lease`. Returns how
    /// many runs it renewed.
    pub fn renew_leases(&self) -> Result<usize, super::SqliteError> {
        let me = Owner::current();
        let until = self.lease_expiry(self.now());
        self.write("renew run leases", |tx| {
            tx.prepare_cached(
                "UPDATE diagnosis_run SET lease_expires_at = ?1 \
                 WHERE status = 'RUNNING' AND owner_pid = ?2 AND owner_token IS ?3 \
                 AND owner_host = ?4",
            )
            .and_then(|mut s| s.execute(params![until, me.pid, me.token, me.host]))
            .map_err(|e| self.err("renew run leases", e))
        })
    }
}
