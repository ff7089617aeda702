//! The lease of this process's RUNNING runs (`diag-owner`): a run is created with a lease
//! until `now + lease`, and while the store handle lives the heartbeat of `diag_owner::Leases`
//! renews the leases of every RUNNING run this process owns, every third of the lease, with
//! the statement here. A process that is killed stops renewing, so another process, on
//! another host included, can tell its runs are interrupted once their lease has run out.
//! The claims this process holds on queued alert notifications (`alerts.rs`) hold a lease by
//! the same rule, renewed by the same beat, so a live investigator keeps its claim however
//! long its run takes.

use rusqlite::params;

use super::SqliteStore;
use diag_owner::Owner;

impl SqliteStore {
    /// Starts the heartbeat of this handle, once.
    pub(crate) fn start_heartbeat(&self) {
        let renew = |shared| SqliteStore { shared }.renew_leases();
        self.shared.leases.start_heartbeat(&self.shared, renew);
    }

    /// Moves the lease of every RUNNING run and every alert claim this process owns to
    /// `now + lease`, in one transaction. Returns how many leases (runs and claims) it renewed.
    pub fn renew_leases(&self) -> Result<usize, super::SqliteError> {
        let me = Owner::current();
        let until = self.shared.leases.expiry(self.now());
        self.write("renew run leases", |tx| {
            let runs = tx
                .prepare_cached(
                    "UPDATE diagnosis_run SET lease_expires_at = ?1 \
                     WHERE status = 'RUNNING' AND owner_pid = ?2 AND owner_token IS ?3 \
                     AND owner_host = ?4",
                )
                .and_then(|mut s| s.execute(params![until, me.pid, me.token, me.host]))
                .map_err(|e| self.err("renew run leases", e))?;
            let claims = tx
                .prepare_cached(
                    "UPDATE alert_queue SET lease_expires_at = ?1 \
                     WHERE state = 'claimed' AND owner_pid = ?2 AND owner_token IS ?3 \
                     AND owner_host = ?4",
                )
                .and_then(|mut s| s.execute(params![until, me.pid, me.token, me.host]))
                .map_err(|e| self.err("renew alert claim leases", e))?;
            Ok(runs + claims)
        })
    }
}
