//! The lease of this process's RUNNING runs (`diag-owner`), as in the SQLite store: a run is
//! created with a lease until `now + lease`, and while the handle lives a background thread
//! renews the leases of every RUNNING run this process owns, every third of the lease. A
//! killed process stops renewing, so a process on any machine can tell its runs are
//! interrupted once the lease has run out. The thread holds the store weakly and ends with
//! the last handle.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{wait, PgError, PgStore, Shared};
use crate::clock::Timestamp;
use diag_owner::Owner;

/// The renewing thread of one store handle; dropping it stops the thread.
pub(crate) struct Heartbeat {
    _stop: mpsc::Sender<()>,
}

impl Heartbeat {
    fn start(shared: Weak<Shared>, lease: Duration) -> Option<Heartbeat> {
        let (stop, stopped) = mpsc::channel::<()>();
        let every = diag_owner::heartbeat_interval(lease);
        std::thread::Builder::new()
            .name("diag-store-lease".into())
            .spawn(move || loop {
                match stopped.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                let store = PgStore { shared };
                if let Err(e) = store.renew_leases() {
                    tracing::warn!(error = %e, "run leases not renewed this time");
                }
            })
            .map_err(|e| tracing::warn!(error = %e, "cannot start the lease heartbeat"))
            .ok()?;
        Some(Heartbeat { _stop: stop })
    }
}

impl PgStore {
    /// When a lease taken or renewed at `now` runs out.
    pub(crate) fn lease_expiry(&self, now: Timestamp) -> String {
        now.saturating_add(self.shared.lease).to_string()
    }

    pub(crate) fn start_heartbeat(&self) {
        self.shared
            .heartbeat
            .get_or_init(|| Heartbeat::start(Arc::downgrade(&self.shared), self.shared.lease));
    }

    /// Moves the lease of every RUNNING run this process owns to `now + lease`; returns how
    /// many it renewed.
    pub fn renew_leases(&self) -> Result<usize, PgError> {
        let me = Owner::current();
        let until = self.lease_expiry(self.now());
        let pid = i64::from(me.pid);
        let client = self.lock();
        let n = wait(client.execute(
            "UPDATE diagnosis_run SET lease_expires_at = $1 \
             WHERE status = 'RUNNING' AND owner_host = $2 AND owner_pid = $3 \
             AND owner_token IS NOT DISTINCT FROM $4",
            &[&until, &me.host, &pid, &me.token],
        ))
        .map_err(|e| self.err("renew run leases", &e))?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}
