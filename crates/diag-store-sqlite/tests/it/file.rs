//! The SQLite store's file, which only that backend has: SQLite's read-only open of a
//! write-protected file, folders and non-database files where the store should be, its one
//! write lock and busy timeout, the WAL and its checkpoints, and the file's size after
//! incremental vacuum. What both backends guarantee is the store port's conformance suite
//! (`crates/diag-store/tests/it/conformance.rs`), run on this backend too. The counterparts
//! on PostgreSQL, where there are any, are the root's (`tests/it/`):
//! - `a_write_protected_file_reads_but_refuses_writes`:
//!   `store_backends::a_read_only_postgres_database_reads_but_refuses_writes`.
//! - `an_uncreatable_location_is_a_clear_error`:
//!   `store_backends::bad_postgres_stores_are_refused_with_one_line_and_nothing_written`
//!   (an unreachable server, refused credentials).
//! - `a_writer_waits_for_a_short_lock_and_reports_a_long_one_as_busy`: PostgreSQL locks rows
//!   and has no store-wide write lock; concurrent writers on both backends are
//!   `store_concurrency::eight_writers_on_eight_hosts_lose_nothing_in_one_store`.
//! - `checkpoints_run_in_the_background_and_a_closed_store_leaves_no_wal`: the WAL file.
//! - `repeated_fill_and_gc_does_not_grow_the_file`: the PostgreSQL server reclaims space by
//!   autovacuum, not diag.

use std::time::Duration;

use diag_store::{RunReader, RunStatus, Store, StoreErrorKind};
use diag_store_sqlite::{SqliteError as StoreError, SqliteStore, StoreOptions};
use diag_testkit::backends::{fill_runs, record_pass_run};
use diag_testkit::records::*;

fn temp() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("diag.db");
    (dir, path)
}

#[test]
fn repeated_fill_and_gc_does_not_grow_the_file() {
    let (_dir, path) = temp();
    let store = SqliteStore::open(&path).unwrap();
    let mut sizes = Vec::new();
    for cycle in 0..5 {
        fill_runs(&Store::new(store.clone()), &format!("c{cycle}"), 150, 0);
        let report = store.collect(None, Some(0)).unwrap();
        assert_eq!(report.runs_deleted, 150);
        assert!(
            report.bytes_before > report.bytes_after,
            "gc gives space back: {report:?}"
        );
        sizes.push(store.file_bytes());
    }
    assert_eq!(counts(&path)[0], 0);
    let first = sizes[0];
    assert!(
        sizes.iter().all(|&s| s <= first + 64 * 1024),
        "file size stays bounded across cycles: {sizes:?}"
    );
    assert!(first < 256 * 1024, "an emptied store is small: {sizes:?}");
    assert_eq!(store.integrity_check().unwrap(), "ok");
}

#[test]
fn a_write_protected_file_reads_but_refuses_writes() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, path) = temp();
    let store = SqliteStore::open(&path).unwrap();
    record_pass_run(&Store::new(store.clone()), "r", "s", 0);
    drop(store);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();

    let store = SqliteStore::open(&path).expect("a read-only store still opens for reading");
    assert!(store.is_read_only());
    assert_eq!(
        store.get_run("r").unwrap().unwrap().status,
        RunStatus::Success
    );
    assert_eq!(store.events("r").unwrap().len(), 6);

    let handle = Store::new(store.clone());
    let err = handle.create_run(new_run("r2", "s", 0)).err().unwrap();
    assert_eq!(err.kind(), StoreErrorKind::ReadOnly, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("read-only") && text.contains("diag.db"),
        "{text}"
    );
    assert_eq!(
        handle
            .record_event("r", &event(7, "x", Status::Completed))
            .unwrap_err()
            .kind(),
        StoreErrorKind::ReadOnly
    );
    assert_eq!(
        handle.gc(None, Some(0)).unwrap_err().kind(),
        StoreErrorKind::ReadOnly
    );
    drop(handle);
    drop(store);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(integrity(&path), "ok");
}

#[test]
fn an_uncreatable_location_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-folder");
    std::fs::write(&file, "plain file").unwrap();
    let err = SqliteStore::open(file.join("sub").join("diag.db"))
        .err()
        .unwrap();
    assert!(matches!(err, StoreError::CreateDir { .. }), "{err}");
    assert!(err.to_string().contains("not-a-folder"), "{err}");

    // A folder where the file should be.
    let err = SqliteStore::open(dir.path()).err().unwrap();
    assert!(matches!(err, StoreError::NotAStore { .. }), "{err}");
    assert!(err.to_string().contains("(it is a folder)"), "{err}");
    assert!(!err.to_string().contains('\n'));

    // A file that is not a database at all: named so, and left as it was.
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, vec![0x42u8; 8192]).unwrap();
    let err = SqliteStore::open(&junk).err().unwrap();
    assert!(matches!(err, StoreError::NotAStore { .. }), "{err}");
    assert!(
        err.to_string().contains("(it is not an SQLite database)"),
        "{err}"
    );
    assert_eq!(std::fs::read(&junk).unwrap(), vec![0x42u8; 8192]);

    // A damaged database (its header, then garbage) is corrupt.
    let damaged = dir.path().join("damaged.db");
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend(vec![0x42u8; 8192]);
    std::fs::write(&damaged, &bytes).unwrap();
    let err = SqliteStore::open(&damaged).err().unwrap();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
}

#[test]
fn a_writer_waits_for_a_short_lock_and_reports_a_long_one_as_busy() {
    let (_dir, path) = temp();
    let patient = SqliteStore::open_with(
        &path,
        StoreOptions {
            busy_timeout: Duration::from_secs(60),
            ..Default::default()
        },
    )
    .map(Store::new)
    .unwrap();
    // Another connection (as another process would) holds the write lock while a writer
    // tries to create a run: the writer cannot finish while the lock is held, and finishes
    // once it is released, however busy the machine is. The writer reads `released` (set just
    // before the lock is given up) when its write returns: had it finished while the lock
    // was held, it would have read `false`. Whenever the writer reaches the lock, the check
    // holds; nothing here waits for an amount of time.
    let holder = raw(&path);
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = std::sync::Arc::new(std::sync::Barrier::new(2));
    let writer = {
        let released = released.clone();
        let started = started.clone();
        std::thread::spawn(move || {
            started.wait();
            let result = patient.create_run(new_run("waited", "s", 0));
            let after_release = released.load(std::sync::atomic::Ordering::SeqCst);
            result.map(|_recorder| (patient, after_release))
        })
    };
    started.wait();
    // The write is still waiting on the lock here, or has not reached it yet: either way it
    // is not stored.
    let stored: i64 = raw(&path)
        .query_row(
            "SELECT count(*) FROM diagnosis_run WHERE run_id = 'waited'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        stored, 0,
        "a write cannot land while another connection holds the lock"
    );
    released.store(true, std::sync::atomic::Ordering::SeqCst);
    holder.execute_batch("COMMIT").unwrap();
    let (patient, after_release) = writer
        .join()
        .unwrap()
        .expect("a write queues behind a short lock");
    assert!(
        after_release,
        "the write returned while another connection held the lock"
    );
    assert!(
        patient.get_run("waited").unwrap().is_some(),
        "the queued write is stored"
    );

    // Held past the busy timeout: a clear error, and the store keeps working afterwards. The
    // lock is held until the error is back, so the timeout expires on any machine.
    let hasty = SqliteStore::open_with(
        &path,
        StoreOptions {
            busy_timeout: Duration::from_millis(300),
            ..Default::default()
        },
    )
    .map(Store::new)
    .unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = hasty
        .record_event("waited", &event(1, "planner", Status::Completed))
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Busy, "{err}");
    assert!(err.to_string().contains("busy timeout"), "{err}");
    holder.execute_batch("COMMIT").unwrap();
    hasty
        .record_event("waited", &event(1, "planner", Status::Completed))
        .unwrap();
    assert_eq!(hasty.events("waited").unwrap().len(), 1);
}

#[test]
fn checkpoints_run_in_the_background_and_a_closed_store_leaves_no_wal() {
    let (_dir, path) = temp();
    let store = SqliteStore::open(&path).unwrap();
    let db_only = || std::fs::metadata(&path).unwrap().len();
    let before = db_only();
    // 40 runs of 12 commits each: past the background threshold, far below SQLite's own
    // auto-checkpoint (4096 pages), so only the background thread copies pages back.
    fill_runs(&Store::new(store.clone()), "c", 40, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while db_only() <= before && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        db_only() > before,
        "the database file grew while the store was open"
    );
    drop(store);
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    assert!(
        !std::path::Path::new(&wal).exists(),
        "the last close checkpoints and removes the WAL"
    );
    assert_eq!(integrity(&path), "ok");
}
