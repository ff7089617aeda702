//! The lease of this process's RUNNING runs (`diag-owner`), as in the SQLite store: a run is
//! created with a lease until `now + lease`, and while the handle lives the heartbeat of
//! `diag_owner::Leases` renews the leases of every RUNNING run this process owns, every third
//! of the lease, with the statement here. A killed process stops renewing, so a process on
//! any machine can tell its runs are interrupted once the lease has run out.

use super::{wait, PgError, PgStore};
use diag_owner::Owner;

impl PgStore {
    /// Starts the heartbeat of this handle, once.
    pub(crate) fn start_heartbeat(&self) {
        let renew = |shared| PgStore { shared }.renew_leases();
        self.shared.leases.start_heartbeat(&self.shared, renew);
    }

    /// Moves the lease of every RUNNING run this process owns to `now + lease`; returns how
    /// many it renewed.
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
        let n = client
            .note(n)
            .map_err(|e| self.err("renew run leases", &e))?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}
