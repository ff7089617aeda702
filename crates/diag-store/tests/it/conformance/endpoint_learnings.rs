//! What model endpoints taught (openspec/specs/run-store/spec.md, "What endpoints taught"), on
//! both backends.

use super::*;
use diag_graph::clock::FixedClock;
use diag_records::endpoint::{Endpoint, Learned, RefusedSampling, SamplingParameter};
use diag_records::model::StructuredOutput;
use diag_store::EndpointLearning;
use diag_testkit::backends::endpoint_memory;
use std::sync::Arc;

fn remote() -> Endpoint {
    Endpoint::new("https://h.example/v1", "m2")
}

/// A learning that only says the endpoint refused `refused`.
fn refusing(refused: &[SamplingParameter]) -> Learned {
    Learned {
        refused_sampling: refused
            .iter()
            .fold(RefusedSampling::default(), |r, p| r.with(*p)),
        ..Learned::default()
    }
}

#[test]
fn a_refused_sampling_parameter_is_kept_never_forgotten_and_recorded_with_a_run() {
    use SamplingParameter::{Seed, Temperature};
    use StructuredOutput::*;
    for_each_fresh(|fresh| {
        let name = fresh.name;
        let store = fresh.open();
        store
            .learn_endpoint(
                &local_endpoint(),
                learned(Some(JsonObjectSchema), None),
                ts(1_000),
            )
            .unwrap();
        store
            .learn_endpoint(&local_endpoint(), refusing(&[Temperature]), ts(2_000))
            .unwrap();
        let temperature = EndpointLearning {
            refused_sampling: refusing(&[Temperature]).refused_sampling,
            ..learning(local_endpoint(), Some(JsonObjectSchema), None, Some(2_000))
        };
        assert_eq!(
            store.endpoint_learning(&local_endpoint()).unwrap(),
            Some(temperature),
            "the refusal joins the form ({name})"
        );
        // A later learning that says nothing of sampling keeps the refusal; another
        // refusal is added to it.
        store
            .learn_endpoint(&local_endpoint(), learned(Some(Off), None), ts(3_000))
            .unwrap();
        store
            .learn_endpoint(&local_endpoint(), refusing(&[Seed]), ts(4_000))
            .unwrap();
        let both = refusing(&[Temperature, Seed]).refused_sampling;
        assert_eq!(
            store.endpoint_learning(&local_endpoint()).unwrap(),
            Some(EndpointLearning {
                refused_sampling: both,
                ..learning(local_endpoint(), Some(Off), None, Some(4_000))
            }),
            "{name}"
        );
        // A run records it as it starts, and a memory from the store starts from it.
        store.create_run(new_run("run-s1", "ses-1", 0)).unwrap();
        store
            .record_started_endpoints("run-s1", &[local_endpoint(), remote()])
            .unwrap();
        let started = store.run_endpoints("run-s1").unwrap();
        assert_eq!(started[0].refused_sampling, both, "{name}");
        assert!(started[1].refused_sampling.is_empty(), "{name}");
        let (memory, _) = endpoint_memory(&store, Arc::new(FixedClock(ts(9_000))));
        assert_eq!(
            memory.learned(&local_endpoint()).refused_sampling,
            both,
            "{name}"
        );
        assert!(memory.learned(&remote()).refused_sampling.is_empty());
    });
}

#[test]
fn what_an_endpoint_taught_is_kept_by_key_merged_and_never_with_a_credential() {
    use StructuredOutput::*;
    for_each_fresh(|fresh| {
        let name = fresh.name;
        let store = fresh.open();
        assert!(store.endpoint_learnings().unwrap().is_empty(), "{name}");
        assert_eq!(local_endpoint().base_url, "http://127.0.0.1:8080/v1");
        store
            .learn_endpoint(
                &local_endpoint(),
                learned(Some(JsonObjectSchema), None),
                ts(1_000),
            )
            .unwrap();
        // A key built by hand is stripped before it is stored, too.
        let hand_built = Endpoint {
            base_url: "https://k:secret@h.example/v1?token=s3cret".into(),
            model: "m2".into(),
        };
        store
            .learn_endpoint(&hand_built, learned(None, Some(4096)), ts(2_000))
            .unwrap();
        assert_eq!(
            store.endpoint_learnings().unwrap(),
            vec![
                learning(local_endpoint(), Some(JsonObjectSchema), None, Some(1_000)),
                learning(remote(), None, Some(4096), Some(2_000)),
            ],
            "{name}"
        );
        // A context size learned later keeps the form; the time is the latest learning's.
        store
            .learn_endpoint(&local_endpoint(), learned(None, Some(2048)), ts(3_000))
            .unwrap();
        assert_eq!(
            store.endpoint_learning(&local_endpoint()).unwrap(),
            Some(learning(
                local_endpoint(),
                Some(JsonObjectSchema),
                Some(2048),
                Some(3_000)
            )),
            "{name}"
        );
        // Learned again: the new form replaces the old one.
        store
            .learn_endpoint(&local_endpoint(), learned(Some(Off), None), ts(4_000))
            .unwrap();
        assert_eq!(
            store.endpoint_learning(&local_endpoint()).unwrap(),
            Some(learning(
                local_endpoint(),
                Some(Off),
                Some(2048),
                Some(4_000)
            )),
            "{name}"
        );
        assert_eq!(
            store
                .endpoint_learning(&Endpoint::new("http://127.0.0.1:8080/v1", "other"))
                .unwrap(),
            None,
            "another model on the same server is another endpoint ({name})"
        );
        let stored = fresh
            .query_rows("SELECT base_url FROM endpoint_learning ORDER BY base_url")
            .join(" ");
        assert_eq!(stored, "http://127.0.0.1:8080/v1 https://h.example/v1");
        for secret in ["s3cret", "secret", "pw", "user", "frag"] {
            assert!(!stored.contains(secret), "{name}: {stored}");
        }
        let blank = Endpoint::new("http://h/v1", " ");
        assert!(store
            .learn_endpoint(&blank, learned(Some(Off), None), ts(1))
            .is_err());
    });
}

#[test]
fn a_run_records_what_the_store_remembered_of_its_endpoints_when_it_started() {
    use StructuredOutput::*;
    for_each_backend(|name, store| {
        store
            .learn_endpoint(
                &local_endpoint(),
                learned(Some(JsonObjectSchema), None),
                ts(1_000),
            )
            .unwrap();
        store.create_run(new_run("run-e1", "ses-1", 0)).unwrap();
        store
            .record_started_endpoints("run-e1", &[remote(), local_endpoint(), local_endpoint()])
            .unwrap();
        // What is learned during or after the run does not change what it started with.
        store
            .learn_endpoint(&local_endpoint(), learned(Some(Off), None), ts(5_000))
            .unwrap();
        let started = vec![
            learning(local_endpoint(), Some(JsonObjectSchema), None, Some(1_000)),
            learning(remote(), None, None, None),
        ];
        assert_eq!(store.run_endpoints("run-e1").unwrap(), started, "{name}");
        assert!(store.run_endpoints("run-other").unwrap().is_empty());

        // Written once, and only while the run is RUNNING.
        let again = store.record_started_endpoints("run-e1", &[local_endpoint()]);
        assert!(again.is_err(), "{name}: {again:?}");
        store
            .finish_failed("run-e1", "stopped", RunSummary::default())
            .unwrap();
        let late = store.record_started_endpoints("run-e1", &[]);
        assert!(
            late.is_err(),
            "a finished run, even with nothing to write ({name})"
        );
        let err = store
            .record_started_endpoints("run-e1", &[remote()])
            .unwrap_err();
        assert!(err.to_string().contains("run-e1"), "{name}: {err}");
        assert!(store
            .record_started_endpoints("run-none", &[remote()])
            .is_err());
        assert_eq!(store.run_endpoints("run-e1").unwrap(), started, "{name}");

        // Collected with its run; what the endpoints taught stays.
        store.gc(None, Some(0)).unwrap();
        assert!(store.get_run("run-e1").unwrap().is_none(), "{name}");
        assert!(store.run_endpoints("run-e1").unwrap().is_empty(), "{name}");
        assert_eq!(store.endpoint_learnings().unwrap().len(), 1, "{name}");
    });
}

#[test]
fn a_memory_from_the_store_starts_from_it_and_keeps_what_it_learns_or_says_why_not() {
    use StructuredOutput::*;
    for_each_fresh(|fresh| {
        let name = fresh.name;
        let store = fresh.open();
        store
            .learn_endpoint(
                &local_endpoint(),
                learned(Some(JsonObjectSchema), None),
                ts(1_000),
            )
            .unwrap();
        let (memory, sink) = endpoint_memory(&store, Arc::new(FixedClock(ts(9_000))));
        assert_eq!(
            memory.learned(&local_endpoint()),
            learned(Some(JsonObjectSchema), None)
        );
        assert_eq!(memory.learned(&remote()), Learned::default());
        memory.learn(&local_endpoint(), |l| l.form = Some(JsonObject));
        memory.learn(&remote(), |l| l.context_tokens = Some(512));
        assert_eq!(
            store.endpoint_learnings().unwrap(),
            vec![
                learning(local_endpoint(), Some(JsonObject), None, Some(9_000)),
                learning(remote(), None, Some(512), Some(9_000)),
            ],
            "stamped by the memory's clock ({name})"
        );
        assert!(sink.failures().is_empty(), "{name}: {:?}", sink.failures());

        // A store that refuses the write: the model still learns, and the failure is kept
        // for the command to show (and logged), not raised.
        fresh.execute("DROP TABLE endpoint_learning");
        memory.learn(&local_endpoint(), |l| l.form = Some(Off));
        assert_eq!(memory.learned(&local_endpoint()).form, Some(Off));
        let failures = sink.failures();
        assert_eq!(failures.len(), 1, "{name}: {failures:?}");
        assert!(
            failures[0].contains("cannot keep what http://127.0.0.1:8080/v1 m taught"),
            "{name}: {failures:?}"
        );
        // And one that cannot be read gives a memory that starts empty, saying why.
        let (memory, sink) = endpoint_memory(&store, Arc::new(FixedClock(ts(9_000))));
        assert_eq!(memory.learned(&local_endpoint()), Learned::default());
        assert_eq!(sink.failures().len(), 1, "{name}");
    });
}

#[test]
fn a_store_of_the_previous_schema_upgrades_in_place_and_keeps_its_runs() {
    use StructuredOutput::*;
    for_each_fresh(|fresh| {
        let name = fresh.name;
        {
            let store = fresh.open();
            record_pass_run(&store, "run-old", "ses-1", 0);
        }
        // The store as the diag before endpoint learnings left it: none of their tables (nor
        // the alerts' that came after them), at its version (SQLite 6, PostgreSQL 1).
        fresh.execute(
            "DROP TABLE run_endpoint; DROP TABLE endpoint_learning; \
             DROP TABLE run_alert; DROP TABLE alert_queue; \
             ALTER TABLE diagnosis_run DROP COLUMN replay_of;",
        );
        fresh.set_schema_version(if fresh.is_sqlite() { 6 } else { 1 });

        let store = fresh.open();
        assert_eq!(
            fresh.stored_schema_version(),
            fresh.schema_version(),
            "{name}"
        );
        let old = store.get_run("run-old").unwrap().unwrap();
        assert_eq!(old.status, RunStatus::Success, "{name}");
        assert!(store.run_endpoints("run-old").unwrap().is_empty(), "{name}");
        store
            .learn_endpoint(
                &local_endpoint(),
                learned(Some(JsonObjectSchema), None),
                ts(1_000),
            )
            .unwrap();
        assert_eq!(
            store.endpoint_learnings().unwrap(),
            vec![learning(
                local_endpoint(),
                Some(JsonObjectSchema),
                None,
                Some(1_000)
            )],
            "{name}"
        );
    });
}
