//! The SQLite store files an earlier diag wrote, each at its schema version, opened by this
//! one: upgraded in place to `SCHEMA_VERSION`, keeping what they held and taking what the
//! later schemas added. The same upgrades on both backends, from a store whose newer tables
//! were dropped, are the conformance suite's (`crates/diag-store/tests/it/conformance/`); the
//! upgrades from the earliest schemas, through the `diag` binary, are the root's
//! `tests/it/store_blobs.rs`.

use std::collections::BTreeMap;

use diag_alertmanager::{Alert, AlertGroup, AlertStatus};
use diag_records::endpoint::{Endpoint, Learned, RefusedSampling};
use diag_records::model::StructuredOutput;
use diag_store::{EndpointLearning, Enqueued, NewNotification, QueueState, Store};
use diag_store_sqlite::SqliteStore;
use diag_testkit::records::*;

fn temp() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("diag.db");
    (dir, path)
}

fn local() -> Endpoint {
    Endpoint::new("http://user:pw@127.0.0.1:8080/v1/?api-key=s3cret#frag", "m")
}

fn learned(form: Option<StructuredOutput>, context_tokens: Option<u32>) -> Learned {
    Learned {
        form,
        context_tokens,
        ..Learned::default()
    }
}

fn row(
    endpoint: Endpoint,
    form: Option<StructuredOutput>,
    context_tokens: Option<u32>,
    at: Option<i64>,
) -> EndpointLearning {
    EndpointLearning {
        endpoint,
        structured_output: form,
        context_tokens,
        refused_sampling: RefusedSampling::default(),
        learned_at: at.map(ts),
    }
}

/// A group of one alert of `service`, started `starts_ms` after the records' epoch.
fn group(service: &str, status: AlertStatus, starts_ms: i64) -> AlertGroup {
    let labels = BTreeMap::from([
        ("alertname".to_string(), "HighErrorRate".to_string()),
        ("service".to_string(), service.to_string()),
    ]);
    AlertGroup::new(
        format!("{{}}:{{alertname=\"HighErrorRate\", service=\"{service}\"}}"),
        vec![Alert {
            fingerprint: format!("fp-{service}"),
            status,
            labels,
            annotations: BTreeMap::from([("summary".to_string(), "5xx > 5%".to_string())]),
            starts_at: ts(starts_ms),
            ends_at: None,
            generator_url: Some("http://prom/graph?g0.expr=up".into()),
        }],
    )
}

fn firing(service: &str) -> NewNotification {
    NewNotification::new(
        "diag".into(),
        group(service, AlertStatus::Firing, 0),
        ts(1_000),
    )
}

fn queued(e: Enqueued) -> i64 {
    match e {
        Enqueued::Queued(id) => id,
        other => panic!("not queued: {other:?}"),
    }
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
            &local(),
            learned(Some(StructuredOutput::JsonObject), Some(8192)),
            ts(1),
        )
        .unwrap();
    assert_eq!(
        store.endpoint_learning(&local()).unwrap(),
        Some(row(
            local(),
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
    assert_eq!(diag_store_sqlite::SCHEMA_VERSION, 9);
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
