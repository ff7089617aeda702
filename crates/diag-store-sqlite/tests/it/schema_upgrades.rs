//! The SQLite store files an earlier diag wrote, each at its schema version, opened by this
//! one: upgraded in place to `SCHEMA_VERSION`, keeping what they held and taking what the
//! later schemas added. The same upgrades on both backends, from a store whose newer tables
//! were dropped, are the conformance suite's (`crates/diag-store/tests/it/conformance/`); the
//! upgrades from the earliest schemas, through the `diag` binary, are the root's
//! `tests/it/store_blobs.rs`.

use diag_records::model::StructuredOutput;
use diag_store::{QueueState, Store};
use diag_store_sqlite::SqliteStore;
use diag_testkit::records::*;

fn temp() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("diag.db");
    (dir, path)
}

/// A store file written by the diag before (schema version 6, with none of these tables)
/// opens, upgrades in place and keeps what endpoints teach from then on.
#[test]
fn a_version_6_sqlite_file_upgrades_in_place() {
    let (_dir, path) = temp();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    SqliteStore::create_at_schema_version(&path, 6).unwrap();
    let store = Store::new(SqliteStore::open(&path).unwrap());
    assert!(store.endpoint_learnings().unwrap().is_empty());
    store
        .learn_endpoint(
            &local_endpoint(),
            learned(Some(StructuredOutput::JsonObject), Some(8192)),
            ts(1),
        )
        .unwrap();
    assert_eq!(
        store.endpoint_learning(&local_endpoint()).unwrap(),
        Some(learning(
            local_endpoint(),
            Some(StructuredOutput::JsonObject),
            Some(8192),
            Some(1)
        ))
    );
    drop(store);
    let version: u32 = raw(&path)
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, diag_store_sqlite::SCHEMA_VERSION);
    assert_eq!(diag_store_sqlite::SCHEMA_VERSION, 10);
}

/// A store file written by the diag before alerts (schema version 7) opens, upgrades in
/// place and queues from then on.
#[test]
fn a_version_7_sqlite_file_upgrades_in_place() {
    let (_dir, path) = temp();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    SqliteStore::create_at_schema_version(&path, 7).unwrap();
    let store = Store::new(SqliteStore::open(&path).unwrap());
    let a = queued(store.enqueue(&firing("a"), 1).unwrap());
    assert_eq!(
        store.queue_entry(a).unwrap().unwrap().state,
        QueueState::Queued
    );
    drop(store);
    let version: u32 = raw(&path)
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, diag_store_sqlite::SCHEMA_VERSION);
}
