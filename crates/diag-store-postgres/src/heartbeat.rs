//! The lease of this process's RUNNING runs (`diag-owner`), as in the SQLite store: a run is
//! created with a lease until `now + lease`, and while the handle lives the heartbeat of
//! `diag_owner::Leases` renews the leases of every RUNNING run this process owns, every third
//! of the lease, with the statement here. A killed process stops renewing, so a process on
//! any machine can tell its runs are interrupted once the lease has run out. The claims this
//! process holds on queued alert notifications (`alerts.rs`) hold a lease by the same rule,
//! renewed by the same beat, so a live investigator keeps its claim however long its run
//! takes.

use super::{wait, PgError, PgStore};
use diag_owner::Owner;

impl PgStore {
    /// Starts the heartbeat of this handle, once.
    pub(crate) fn start_heartbeat(&self) {
        let renew = |shared| PgStore { shared }.renew_leases();
        self.shared.leases.start_heartbeat(&self.shared, renew);
    }

    /// Moves the lease of every RUNNING run and every alert claim this process owns to
    /// `now + lease`; returns how many leases (runs and claims) it renewed.
    pub fn renew_leases(&self) -> Result<usize, PgError> {
        let me = Owner::current();
        let until = self.shared.leases.expiry(self.now());
        let pid = i64::from(me.pid);
        let mut client = self.lock();
        let n = wait(client.execute(
            "UPDATE diagnosis_run SET lease_expires_at = $1 \
             WHERE status = 'RUNNING' AND owner_host = $2 AND owner_pid = $3 \
             AND owner_token IS NOT DISTINCT FROM $4",
            &[&until, &me.host, &pid, &me.token],
        ));
        let runs = client
            .note(n)
            .map_err(|e| self.err("renew run leases", &e))?;
        let n = wait(client.execute(
            "UPDATE alert_queue SET lease_expires_at = $1 \
             WHERE state = 'claimed' AND owner_host = $2 AND owner_pid = $3 \
             AND owner_token IS NOT DISTINCT FROM $4",
            &[&until, &me.host, &pid, &me.token],
        ));
        let claims = client
            .note(n)
            .map_err(|e| self.err("renew alert claim leases", &e))?;
        Ok(usize::try_from(runs.saturating_add(claims)).unwrap_or(usize::MAX))
    }
}
