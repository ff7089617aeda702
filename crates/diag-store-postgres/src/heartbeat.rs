//! The lease of this process's RUNNING runs (`diag-owner`), as in the SQLite store: a run is
//! created with a lease until `now + lease`, and while the handle lives a background thread
//! renews the leases of every RUNNING run this process owns, every third of the lease. A
//! killed process stops renewing, so a process on any machine can tell its runs are
//! interrupted once the lease has run out. The thread holds the store weakly and ends with
//! the last handle.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{wait, PgError, PgStore, Shared};
use crate::clock::Timestamp;
use diag_owner::{Heartbeat, Owner};

/// Starts the heartbeat of one store handle: it renews the handle's RUNNING runs and ends
/// with the last handle (`diag_owner::Heartbeat`).
fn start(shared: Weak<Shared>, lease: Duration) -> Option<Heartbeat> {
    Heartbeat::start(lease, move || {
        let Some(shared) = shared.upgrade() else {
            return false;
        };
        if let Err(e) = (PgStore { shared }).renew_leases() {
            tracing::warn!(error = %e, "run leases not renewed this time");
        }
        true
    })
    .map_err(|e| tracing::warn!(error = %e, "cannot start the lease heartbeat"))
    .ok()
}

impl PgStore {
    /// When a lease taken or renewed at `now` runs out.
    pub(crate) fn lease_expiry(&self, now: Timestamp) -> String {
        diag_core::store::lease_expiry(now, self.shared.lease).to_string()
    }

    pub(crate) fn start_heartbeat(&self) {
        self.shared
            .heartbeat
            .get_or_init(|| start(Arc::downgrade(&self.shared), self.shared.lease));
    }

    /// Moves the lease of every RUNNING run this process owns to `now + lease`; returns how
    /// many it renewed.
    pub fn renew_leases(&self) -> Result<usize, PgError> {
        let me = Owner::current();
        let until = self.lease_expiry(self.now());
        let pid = i64::from(me.pid);
        let mut client = self.lock();
        let n = wait(client.execute(
            "UPDATE diagnosis_run SET lease_expires_at = $1 \
             WHERE status = 'RUNNING' AND owner_host = $2 AND owner_pid = $3 \
             AND owner_token IS NOT DISTINCT FROM $4",
            &[&until, &me.host, &pid, &me.token],
        ));
        let n = client
            .note(n)
            .map_err(|e| self.err("renew run leases", &e))?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}
