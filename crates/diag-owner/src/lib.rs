//! `diag-owner`: this process as the owner of a RUNNING run, and the rule by which any process
//! that opens a run store decides that a RUNNING run's owner is gone, so that the run is swept
//! FAILED (`interrupted`) with its partial trace kept. Every run store backend (SQLite,
//! PostgreSQL) sweeps by this one rule, so the two behave alike.
//!
//! A run row carries its owner: a **host id** ([`Owner::host`]: `DIAG_HOST_ID`, else the
//! machine id, else the host name), the **pid**, a **start token** (Linux: boot id, pid
//! namespace and the process's start time; see `liveness.rs`), and a **lease**: a time until
//! which the owner vouches that it is alive. A live owner renews its leases (the heartbeat of
//! its store handle's [`Leases`], every third of [`lease_duration`]), so the lease of a killed
//! process runs out.
//!
//! [`is_gone`] decides (and [`gone_runs`] picks, among the RUNNING runs a store reads back,
//! the ones a sweep marks):
//! 1. An owner on this host whose token says it runs under this kernel and pid namespace is
//!    checked directly: gone when that process no longer exists, alive while it does, whatever
//!    its lease says (a stalled but live process is never swept from under itself, and a
//!    killed one is swept at once).
//! 2. Any other owner (another host, another boot, another container) cannot be seen from
//!    here: it is gone when its lease has expired by this process's clock.
//! 3. A row without a lease (written before leases were kept) is judged by the pid rule alone,
//!    as it always was.
//!
//! When in doubt an owner counts as alive: sweeping a live run would corrupt its lifecycle,
//! while leaving a dead one RUNNING a little longer costs nothing.

// No `unwrap`/`expect` outside tests: a failure is a value.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod liveness;

use std::sync::OnceLock;
use std::time::Duration;

use diag_graph::clock::Timestamp;
use diag_records::env_vars::EnvVars;

pub use liveness::is_alive;

/// How long a lease lasts when `DIAG_STORE_LEASE_MS` does not say: a minute, renewed every 20 s.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// This process as a run owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Which machine: `DIAG_HOST_ID` when set and non-empty, else `/etc/machine-id`, else the
    /// kernel's host name, else `unknown-host`.
    pub host: String,
    pub pid: u32,
    /// `<boot id>:<pid namespace>:<start time>` on Linux; `None` where the platform does not
    /// tell.
    pub token: Option<String>,
}

impl Owner {
    /// This process, computed once.
    pub fn current() -> &'static Owner {
        static CURRENT: OnceLock<Owner> = OnceLock::new();
        CURRENT.get_or_init(|| {
            let pid = std::process::id();
            Owner {
                host: host_id(),
                pid,
                token: liveness::start_token(pid),
            }
        })
    }
}

fn host_id() -> String {
    let configured = std::env::var(EnvVars::DIAG_HOST_ID)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    let file = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    configured
        .or_else(|| file("/etc/machine-id"))
        .or_else(|| file("/proc/sys/kernel/hostname"))
        .unwrap_or_else(|| "unknown-host".to_string())
}

/// How long a lease lasts: `DIAG_STORE_LEASE_MS` (milliseconds, at least 100) when it is set
/// to a number, else [`DEFAULT_LEASE`].
pub fn lease_duration() -> Duration {
    lease_from(std::env::var(EnvVars::DIAG_STORE_LEASE_MS).ok().as_deref())
}

fn lease_from(value: Option<&str>) -> Duration {
    value
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|ms| Duration::from_millis(ms.max(100)))
        .unwrap_or(DEFAULT_LEASE)
}

/// How often a live owner renews its leases: a third of the lease, so two renewals can be
/// late before it runs out.
pub fn heartbeat_interval(lease: Duration) -> Duration {
    lease / 3
}

/// A thread that calls `beat` every [`heartbeat_interval`] of `lease` (a store renews its
/// RUNNING runs' leases there) until `beat` returns false or the `Heartbeat` is dropped.
/// [`Leases::start_heartbeat`] holds the store only weakly in `beat`, so the thread never
/// keeps a store open: it ends when the store goes.
pub struct Heartbeat {
    _stop: std::sync::mpsc::Sender<()>,
}

impl Heartbeat {
    /// Starts the thread; `Err` when the system cannot start one.
    pub fn start(
        lease: Duration,
        mut beat: impl FnMut() -> bool + Send + 'static,
    ) -> std::io::Result<Heartbeat> {
        use std::sync::mpsc::RecvTimeoutError;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let every = heartbeat_interval(lease);
        std::thread::Builder::new()
            .name("diag-store-lease".into())
            .spawn(move || loop {
                match stopped.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                if !beat() {
                    return;
                }
            })?;
        Ok(Heartbeat { _stop: stop })
    }
}

/// The leases of the runs one store handle creates: how long a lease lasts, when one taken
/// now runs out, and the heartbeat that renews them while the handle lives. Every backend
/// keeps one per handle, so the rule is the same on each.
pub struct Leases {
    lease: Duration,
    heartbeat: OnceLock<Option<Heartbeat>>,
}

impl Leases {
    pub fn new(lease: Duration) -> Leases {
        Leases {
            lease,
            heartbeat: OnceLock::new(),
        }
    }

    /// When a lease taken or renewed at `now` runs out, as a store keeps it: RFC 3339 text of
    /// the store's clock (`diag_store::lease_expiry`).
    pub fn expiry(&self, now: Timestamp) -> String {
        diag_store::lease_expiry(now, self.lease).to_string()
    }

    /// Starts the heartbeat of the handle whose shared state is `store`, once (with the
    /// handle's first run or alert claim): every [`heartbeat_interval`] it calls `renew`, which
    /// moves the leases of the handle's RUNNING runs and claims, on the store held only weakly, so the thread ends
    /// with the last handle and never keeps the store open. A renewal that fails is logged
    /// and tried again at the next beat; a thread that cannot start is logged, and the leases
    /// then run out unrenewed.
    pub fn start_heartbeat<S, T, E>(
        &self,
        store: &std::sync::Arc<S>,
        renew: impl Fn(std::sync::Arc<S>) -> Result<T, E> + Send + 'static,
    ) where
        S: Send + Sync + 'static,
        E: std::fmt::Display,
    {
        self.heartbeat.get_or_init(|| {
            let store = std::sync::Arc::downgrade(store);
            Heartbeat::start(self.lease, move || {
                let Some(store) = store.upgrade() else {
                    return false;
                };
                if let Err(e) = renew(store) {
                    tracing::warn!(error = %e, "run leases not renewed this time");
                }
                true
            })
            .map_err(|e| tracing::warn!(error = %e, "cannot start the lease heartbeat"))
            .ok()
        });
    }
}

pub use diag_store::StoredOwner;

/// The owner columns of a stored RUNNING run.
fn owner_of(stored: &StoredOwner) -> RunOwner<'_> {
    RunOwner {
        host: stored.host.as_deref(),
        pid: stored.pid,
        token: stored.token.as_deref(),
        // A lease that cannot be read counts as none: the pid rule decides.
        lease_expires_at: stored
            .lease_expires_at
            .as_deref()
            .and_then(|t| Timestamp::parse_rfc3339(t).ok()),
    }
}

/// The runs among `running` (RUNNING runs, as a store reads their owners) whose owner is gone
/// at `now` by [`is_gone`], in their order: the runs a sweep marks FAILED (`interrupted`).
pub fn gone_runs(running: Vec<StoredOwner>, now: Timestamp) -> Vec<String> {
    gone_runs_as(running, Owner::current(), now, &|pid, token| {
        liveness::is_alive(pid, token)
    })
}

fn gone_runs_as(
    running: Vec<StoredOwner>,
    me: &Owner,
    now: Timestamp,
    alive: &dyn Fn(i64, Option<&str>) -> bool,
) -> Vec<String> {
    running
        .into_iter()
        .filter(|r| is_gone_as(&owner_of(r), me, now, alive))
        .map(|r| r.run_id)
        .collect()
}

/// The owner columns of one RUNNING run.
#[derive(Debug, Clone, Copy)]
pub struct RunOwner<'a> {
    /// `None` for rows written before host ids were kept.
    pub host: Option<&'a str>,
    pub pid: i64,
    pub token: Option<&'a str>,
    /// `None` for rows written before leases were kept.
    pub lease_expires_at: Option<Timestamp>,
}

/// Whether the owner of a RUNNING run is gone (the rule of the crate documentation), as seen
/// by this process at `now`.
pub fn is_gone(owner: &RunOwner<'_>, now: Timestamp) -> bool {
    is_gone_as(owner, Owner::current(), now, &|pid, token| {
        liveness::is_alive(pid, token)
    })
}

fn is_gone_as(
    owner: &RunOwner<'_>,
    me: &Owner,
    now: Timestamp,
    alive: &dyn Fn(i64, Option<&str>) -> bool,
) -> bool {
    let Some(expires) = owner.lease_expires_at else {
        return !alive(owner.pid, owner.token);
    };
    if owner.host == Some(me.host.as_str()) && same_kernel(owner.token, me.token.as_deref()) {
        return !alive(owner.pid, owner.token);
    }
    expires <= now
}

/// True when both tokens name the same boot and pid namespace (their first two fields).
fn same_kernel(theirs: Option<&str>, mine: Option<&str>) -> bool {
    let prefix = |t: &str| t.rsplit_once(':').map(|(p, _)| p.to_string());
    match (theirs.and_then(prefix), mine.and_then(prefix)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Owner {
        Owner {
            host: "host-a".into(),
            pid: 10,
            token: Some("boot-1:ns-1:500".into()),
        }
    }

    const NOW: Timestamp = Timestamp::from_unix_ms(1_000_000);

    fn run<'a>(host: &'a str, token: &'a str, expires_ms: Option<i64>) -> RunOwner<'a> {
        RunOwner {
            host: Some(host),
            pid: 42,
            token: Some(token),
            lease_expires_at: expires_ms.map(Timestamp::from_unix_ms),
        }
    }

    #[test]
    fn an_owner_this_kernel_can_see_is_judged_by_its_process_not_its_lease() {
        let dead = |_: i64, _: Option<&str>| false;
        let alive = |_: i64, _: Option<&str>| true;
        let expired = run("host-a", "boot-1:ns-1:77", Some(NOW.unix_ms() - 1));
        let current = run("host-a", "boot-1:ns-1:77", Some(NOW.unix_ms() + 60_000));
        assert!(
            !is_gone_as(&expired, &me(), NOW, &alive),
            "a stalled live process is kept"
        );
        assert!(
            is_gone_as(&current, &me(), NOW, &dead),
            "a killed process is swept at once"
        );
    }

    #[test]
    fn an_owner_elsewhere_is_gone_when_its_lease_has_run_out() {
        // Whatever the local pid check would say: that pid is not the owner's process.
        let alive = |_: i64, _: Option<&str>| true;
        let dead = |_: i64, _: Option<&str>| false;
        for (host, token) in [
            ("host-b", "boot-1:ns-1:77"),
            ("host-a", "boot-2:ns-1:77"),
            ("host-a", "boot-1:ns-2:77"),
            ("host-a", "unparseable"),
        ] {
            let expired = run(host, token, Some(NOW.unix_ms()));
            let live = run(host, token, Some(NOW.unix_ms() + 1));
            assert!(is_gone_as(&expired, &me(), NOW, &alive), "{host} {token}");
            assert!(!is_gone_as(&live, &me(), NOW, &dead), "{host} {token}");
        }
    }

    #[test]
    fn a_row_without_a_lease_keeps_the_pid_rule() {
        let legacy = RunOwner {
            host: None,
            pid: 42,
            token: Some("boot-9:ns-1:77"),
            lease_expires_at: None,
        };
        assert!(is_gone_as(&legacy, &me(), NOW, &|_, _| false));
        assert!(!is_gone_as(&legacy, &me(), NOW, &|_, _| true));
    }

    #[test]
    fn the_sweep_takes_the_runs_of_gone_owners_and_reads_an_unreadable_lease_as_none() {
        let stored = |run_id: &str, pid: i64, lease: Option<&str>| StoredOwner {
            run_id: run_id.into(),
            host: Some("host-b".into()),
            pid,
            token: Some("boot-1:ns-1:77".into()),
            lease_expires_at: lease.map(str::to_string),
        };
        let running = vec![
            stored("expired", 1, Some("1970-01-01T00:16:39.999Z")),
            stored("leased", 2, Some("1970-01-01T00:16:40.001Z")),
            stored("unreadable-dead", 3, Some("soon")),
            stored("unreadable-alive", 4, Some("soon")),
            stored("legacy-dead", 3, None),
        ];
        // Pid 4 is alive; every other pid is gone.
        let alive = |pid: i64, _: Option<&str>| pid == 4;
        assert_eq!(
            gone_runs_as(running, &me(), NOW, &alive),
            ["expired", "unreadable-dead", "legacy-dead"]
        );
    }

    #[test]
    fn the_heartbeat_renews_through_a_store_it_never_keeps_open() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        use std::time::Instant;

        struct Handle {
            leases: Leases,
            renewals: AtomicUsize,
        }
        let handle = Arc::new(Handle {
            leases: Leases::new(Duration::from_millis(30)),
            renewals: AtomicUsize::new(0),
        });
        handle.leases.start_heartbeat(&handle, |h| {
            h.renewals.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(1)
        });
        // Started once per handle: a second start changes nothing.
        handle
            .leases
            .start_heartbeat(&handle, |_| -> Result<usize, String> {
                panic!("a second heartbeat")
            });
        let deadline = Instant::now() + Duration::from_secs(10);
        while handle.renewals.load(Ordering::SeqCst) < 2 {
            assert!(Instant::now() < deadline, "no renewal within 10 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        let gone = Arc::downgrade(&handle);
        drop(handle);
        while gone.upgrade().is_some() {
            assert!(
                Instant::now() < deadline,
                "the heartbeat kept the store open"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_lease_runs_out_a_lease_after_it_is_taken() {
        let leases = Leases::new(Duration::from_secs(60));
        assert_eq!(leases.expiry(NOW), "1970-01-01T00:17:40.000Z");
    }

    #[test]
    fn the_lease_comes_from_the_environment_value_with_a_floor() {
        assert_eq!(lease_from(None), DEFAULT_LEASE);
        assert_eq!(lease_from(Some("nonsense")), DEFAULT_LEASE);
        assert_eq!(lease_from(Some("1500")), Duration::from_millis(1500));
        assert_eq!(lease_from(Some("5")), Duration::from_millis(100));
        assert_eq!(
            heartbeat_interval(Duration::from_secs(60)),
            Duration::from_secs(20)
        );
    }

    #[test]
    fn this_process_has_a_host_id() {
        assert!(!Owner::current().host.is_empty());
    }
}
