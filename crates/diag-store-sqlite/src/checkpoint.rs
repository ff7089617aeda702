//! Checkpointing off the write path.
//!
//! A WAL checkpoint copies committed pages into the database file and costs two fsyncs.
//! SQLite runs it inside whichever commit crosses the auto-checkpoint threshold, so every few
//! hundred runs one event commit would stall for the length of two fsyncs. Instead, each
//! writable [`SqliteStore`](super::SqliteStore) has a small thread with its own connection that runs a
//! `PASSIVE` checkpoint (which never blocks writers or readers) after every
//! [`COMMITS_PER_CHECKPOINT`] commits, and once a second while commits are pending. The
//! writer keeps SQLite's auto-checkpoint at a higher threshold as a safety net, so the WAL
//! stays bounded even if this thread falls behind.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// Commits between background checkpoints: a scripted six-node run commits five times and
/// a commit appends one to five pages (a live run commits once more per model and tool
/// call), so the WAL stays around a few MiB.
pub(crate) const COMMITS_PER_CHECKPOINT: u64 = 256;

/// How long pending commits may wait for a checkpoint when writing has stopped.
const IDLE_CHECKPOINT: Duration = Duration::from_secs(1);

#[derive(Default)]
struct State {
    pending: u64,
    stop: bool,
}

#[derive(Default)]
struct Signal {
    state: Mutex<State>,
    wake: Condvar,
}

/// The background checkpointer of one store. Dropping it stops and joins the thread.
pub(crate) struct Checkpointer {
    signal: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread; `None` when its connection cannot be opened (the writer's own
    /// auto-checkpoint then does the work, as in plain SQLite).
    pub fn start(path: &Path) -> Option<Checkpointer> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .ok()?;
        conn.pragma_update(None, "wal_autocheckpoint", 0).ok()?;
        let signal = Arc::new(Signal::default());
        let theirs = signal.clone();
        let thread = std::thread::Builder::new()
            .name("diag-store-checkpoint".into())
            .spawn(move || run(&conn, &theirs))
            .ok()?;
        Some(Checkpointer {
            signal,
            thread: Some(thread),
        })
    }

    /// Called after every commit.
    pub fn committed(&self) {
        let mut state = lock(&self.signal.state);
        state.pending += 1;
        if state.pending >= COMMITS_PER_CHECKPOINT {
            self.signal.wake.notify_one();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        lock(&self.signal.state).stop = true;
        self.signal.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

fn run(conn: &Connection, signal: &Signal) {
    loop {
        {
            let mut state = lock(&signal.state);
            while !state.stop && state.pending < COMMITS_PER_CHECKPOINT {
                let (next, timeout) = signal
                    .wake
                    .wait_timeout(state, IDLE_CHECKPOINT)
                    .unwrap_or_else(|p| p.into_inner());
                state = next;
                if timeout.timed_out() && state.pending > 0 {
                    break;
                }
            }
            if state.stop {
                // The writer's connection closes after this one and, as the last one,
                // checkpoints everything itself.
                return;
            }
            state.pending = 0;
        }
        // A PASSIVE checkpoint copies what it can without waiting for anyone; a busy or
        // failed one is simply tried again after the next batch of commits.
        let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
    }
}
