//! Alerts in the run store (openspec/specs/run-store/spec.md, "Alerts and the alert queue"):
//! the alert group a run investigated, and the durable queue of `diag serve`, on both
//! backends.

use super::*;
use diag_alertmanager::AlertStatus;
use diag_store::{
    AlertSource, ClaimEnd, Enqueued, NewNotification, QueueCounts, QueueState, RunAlerts,
    MAX_ATTEMPTS,
};
use std::time::Instant;

fn resolved(service: &str) -> NewNotification {
    NewNotification::new(
        "diag".into(),
        alert_group(service, AlertStatus::Resolved, 0),
        ts(2_000),
    )
}

fn state(store: &Store, id: i64) -> QueueState {
    store.queue_entry(id).unwrap().unwrap().state
}

fn refusal(r: Result<(), diag_store::StoreError>) -> Kind {
    kind(&r.unwrap_err())
}

#[test]
fn a_run_keeps_the_alert_group_it_investigated_once_while_running() {
    for_each_backend(|name, store| {
        let alerts = RunAlerts::new(
            AlertSource::Webhook,
            alert_group("checkout", AlertStatus::Firing, 0),
        );
        store.create_run(new_run("run-a", "s", 0)).unwrap();
        assert_eq!(store.run_alerts("run-a").unwrap(), None, "{name}");
        store.record_run_alerts("run-a", &alerts).unwrap();
        assert_eq!(
            store.run_alerts("run-a").unwrap(),
            Some(alerts.clone()),
            "{name}"
        );
        assert_eq!(
            refusal(store.record_run_alerts("run-a", &alerts)),
            Kind::Duplicate("alert group"),
            "{name}: one group per run"
        );
        assert_eq!(
            refusal(store.record_run_alerts("run-none", &alerts)),
            Kind::UnknownRun("run-none".into()),
            "{name}"
        );
        store.create_run(new_run("run-b", "s", 1)).unwrap();
        store
            .finish_failed("run-b", "stopped", RunSummary::default())
            .unwrap();
        assert_eq!(
            refusal(store.record_run_alerts("run-b", &alerts)),
            Kind::NotRunning("FAILED".into()),
            "{name}"
        );
        assert_eq!(store.run_alerts("run-b").unwrap(), None, "{name}");
        let mut forged = alerts.clone();
        forged.identity = "not-the-group".into();
        store.create_run(new_run("run-c", "s", 2)).unwrap();
        assert_eq!(
            refusal(store.record_run_alerts("run-c", &forged)),
            Kind::Invalid,
            "{name}"
        );
        let api = RunAlerts::new(
            AlertSource::Api,
            alert_group("payments", AlertStatus::Firing, 5),
        );
        store.record_run_alerts("run-c", &api).unwrap();
        assert_eq!(store.run_alerts("run-c").unwrap(), Some(api), "{name}");

        // Collected with its run.
        store.finish_success("run-a", summary("ok")).unwrap();
        store.finish_success("run-c", summary("ok")).unwrap();
        store.gc(None, Some(0)).unwrap();
        assert_eq!(store.run_alerts("run-a").unwrap(), None, "{name}");
        assert_eq!(
            store.investigated_run(&alerts.identity).unwrap(),
            None,
            "{name}"
        );
    });
}

#[test]
fn a_group_is_investigated_by_its_newest_live_or_finished_run_not_an_interrupted_one() {
    for_each_backend(|name, store| {
        let g = alert_group("checkout", AlertStatus::Firing, 0);
        let identity = g.identity();
        let alerts = RunAlerts::new(AlertSource::Api, g);
        let start = |run_id: &str, started_ms: i64| {
            store.create_run(new_run(run_id, "s", started_ms)).unwrap();
            store.record_run_alerts(run_id, &alerts).unwrap();
        };
        let investigated = || store.investigated_run(&identity).unwrap();
        start("run-1", 0);
        assert_eq!(
            investigated().as_deref(),
            Some("run-1"),
            "{name}: a RUNNING run is investigating it"
        );
        store.finish_success("run-1", summary("ok")).unwrap();
        assert_eq!(investigated().as_deref(), Some("run-1"), "{name}: SUCCESS");
        start("run-2", 10);
        store
            .finish_failed("run-2", "the model endpoint refused", RunSummary::default())
            .unwrap();
        assert_eq!(
            investigated().as_deref(),
            Some("run-2"),
            "{name}: FAILED, newer"
        );
        start("run-3", 20);
        store
            .finish_failed("run-3", INTERRUPTED, RunSummary::default())
            .unwrap();
        assert_eq!(
            investigated().as_deref(),
            Some("run-2"),
            "{name}: FAILED interrupted does not count"
        );
        start("run-0", 5);
        store.finish_success("run-0", summary("ok")).unwrap();
        assert_eq!(investigated().as_deref(), Some("run-2"), "{name}: older");
        start("run-4", 30);
        assert_eq!(
            investigated().as_deref(),
            Some("run-4"),
            "{name}: RUNNING, newest"
        );
        let other = alert_group("payments", AlertStatus::Firing, 0).identity();
        assert_eq!(store.investigated_run(&other).unwrap(), None, "{name}");
    });
}

#[test]
fn a_notification_is_queued_once_within_the_bound_and_a_resolved_one_only_recorded() {
    for_each_fresh(|fresh| {
        let name = fresh.name;
        let store = fresh.open();
        assert_eq!(
            store.queue_counts().unwrap(),
            QueueCounts::default(),
            "{name}"
        );
        let a = queued(store.enqueue(&firing("a"), 2).unwrap());
        assert_eq!(
            store.enqueue(&firing("a"), 2).unwrap(),
            Enqueued::Duplicate(a),
            "{name}: a repeated delivery"
        );
        let rows = || fresh.query("SELECT count(*) FROM alert_queue");
        assert_eq!(rows(), "1", "{name}: nothing written for a duplicate");
        let b = queued(store.enqueue(&firing("b"), 2).unwrap());
        assert!(b > a, "{name}");
        assert_eq!(
            store.enqueue(&firing("c"), 2).unwrap(),
            Enqueued::Full,
            "{name}"
        );
        assert_eq!(rows(), "2", "{name}: nothing written when full");
        assert_eq!(
            store.enqueue(&firing("b"), 2).unwrap(),
            Enqueued::Duplicate(b),
            "{name}: a duplicate is told as such when full"
        );
        // A resolved notification is recorded, past the bound, and never claimed.
        let r = queued(store.enqueue(&resolved("a"), 2).unwrap());
        assert_eq!(state(&store, r), QueueState::Resolved, "{name}");
        assert_eq!(
            store.enqueue(&resolved("a"), 2).unwrap(),
            Enqueued::Duplicate(r),
            "{name}"
        );
        let counts = store.queue_counts().unwrap();
        assert_eq!(
            counts,
            QueueCounts {
                queued: 2,
                resolved: 1,
                ..QueueCounts::default()
            },
            "{name}"
        );
        assert_eq!(counts.pending(), 2, "{name}");

        let entry = store.queue_entry(a).unwrap().unwrap();
        assert_eq!(entry.identity, firing("a").identity, "{name}");
        assert_eq!(entry.state, QueueState::Queued, "{name}");
        assert_eq!(entry.status, AlertStatus::Firing, "{name}");
        assert_eq!(entry.group.group_key, firing("a").group.group_key, "{name}");
        assert_eq!(entry.received_at, ts(1_000), "{name}");
        assert_eq!((entry.attempts, entry.runs.len()), (0, 0), "{name}");
        assert_eq!(entry.failure, None, "{name}");
        assert_eq!(store.queue_entry(a + 1000).unwrap(), None, "{name}");
        let ids: Vec<i64> = store
            .queue_entries()
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(ids, [a, b, r], "{name}: oldest first");

        assert_eq!(store.claim().unwrap().map(|c| c.id), Some(a), "{name}");
        assert_eq!(store.claim().unwrap().map(|c| c.id), Some(b), "{name}");
        assert_eq!(
            store.claim().unwrap(),
            None,
            "{name}: never the resolved one"
        );
        // Claimed notifications still count against the bound.
        assert_eq!(
            store.enqueue(&firing("c"), 2).unwrap(),
            Enqueued::Full,
            "{name}"
        );
        assert_eq!(
            store.enqueue(&firing("c"), 0).unwrap(),
            Enqueued::Full,
            "{name}"
        );
        let mut forged = firing("d");
        forged.identity = "x".into();
        assert_eq!(
            kind(&store.enqueue(&forged, 9).unwrap_err()),
            Kind::Invalid,
            "{name}"
        );
    });
}

#[test]
fn claims_go_oldest_first_once_each_and_end_only_by_their_owner() {
    for_each_fresh(|fresh| {
        let name = fresh.name;
        let store = fresh.open();
        let other = fresh.open();
        let ids: Vec<i64> = ["a", "b", "c"]
            .iter()
            .map(|s| queued(store.enqueue(&firing(s), 10).unwrap()))
            .collect();
        let (a, b, c) = (ids[0], ids[1], ids[2]);
        let first = store.claim().unwrap().unwrap();
        assert_eq!((first.id, first.attempt), (a, 1), "{name}");
        assert_eq!(first.identity, firing("a").identity, "{name}");
        assert_eq!(first.group, firing("a").group, "{name}");
        assert!(first.earlier_runs.is_empty(), "{name}");
        assert_eq!(
            other.claim().unwrap().map(|c| c.id),
            Some(b),
            "{name}: another handle"
        );
        assert_eq!(store.claim().unwrap().map(|c| c.id), Some(c), "{name}");
        assert_eq!(other.claim().unwrap(), None, "{name}: all claimed");
        assert_eq!(store.queue_counts().unwrap().claimed, 3, "{name}");

        store.claim_started_run(a, "run-a1").unwrap();
        store
            .end_claim(a, ClaimEnd::Investigated { run_id: "run-a1" })
            .unwrap();
        let done = store.queue_entry(a).unwrap().unwrap();
        assert_eq!(done.state, QueueState::Done, "{name}");
        assert_eq!(done.runs, ["run-a1"], "{name}");
        assert_eq!(
            refusal(store.end_claim(a, ClaimEnd::Released)),
            Kind::NotClaimed("done".into()),
            "{name}"
        );
        assert_eq!(
            refusal(store.claim_started_run(a, "run-a2")),
            Kind::NotClaimed("done".into()),
            "{name}"
        );

        // Given back: queued again, the attempt not counted.
        store.end_claim(b, ClaimEnd::Released).unwrap();
        let back = store.queue_entry(b).unwrap().unwrap();
        assert_eq!(
            (back.state, back.attempts),
            (QueueState::Queued, 0),
            "{name}"
        );
        let again = other.claim().unwrap().unwrap();
        assert_eq!((again.id, again.attempt), (b, 1), "{name}");

        // A claim held by a process elsewhere, whose lease has not run out.
        fresh.execute(&format!(
            "UPDATE alert_queue SET owner_host = 'host-elsewhere', \
             lease_expires_at = '2999-01-01T00:00:00.000Z' WHERE id = {c}"
        ));
        assert_eq!(
            refusal(store.end_claim(c, ClaimEnd::Failed { failure: "no" })),
            Kind::NotClaimed("claimed by another process".into()),
            "{name}"
        );
        assert_eq!(
            refusal(store.claim_started_run(c, "run-c1")),
            Kind::NotClaimed("claimed by another process".into()),
            "{name}"
        );
        assert_eq!(
            store.claim().unwrap(),
            None,
            "{name}: a live claim is not taken"
        );
        assert_eq!(
            refusal(store.end_claim(c + 1000, ClaimEnd::Released)),
            Kind::NotClaimed("unknown".into()),
            "{name}"
        );

        store
            .end_claim(
                b,
                ClaimEnd::Failed {
                    failure: "no model endpoint\nis configured",
                },
            )
            .unwrap();
        let failed = store.queue_entry(b).unwrap().unwrap();
        assert_eq!(failed.state, QueueState::Failed, "{name}");
        assert_eq!(
            failed.failure.as_deref(),
            Some("no model endpoint is configured"),
            "{name}"
        );
        assert_eq!(
            store.queue_counts().unwrap(),
            QueueCounts {
                claimed: 1,
                done: 1,
                failed: 1,
                ..QueueCounts::default()
            },
            "{name}"
        );
    });
}

#[test]
fn a_claim_shows_its_holder_and_a_failed_one_keeps_only_runs_that_exist() {
    for_each_backend(|name, store| {
        let a = queued(store.enqueue(&firing("a"), 10).unwrap());
        let waiting = store.queue_entry(a).unwrap().unwrap();
        assert_eq!(waiting.claim, None, "{name}");
        assert_eq!(waiting.receiver, "diag", "{name}");
        assert_eq!(waiting.group, firing("a").group, "{name}");
        assert_eq!(waiting.received_at, ts(1_000), "{name}");
        store.claim().unwrap().unwrap();
        let claimed = store.queue_entry(a).unwrap().unwrap();
        let holder = claimed.claim.clone().expect("a claim shows its holder");
        assert_eq!(holder.pid, i64::from(std::process::id()), "{name}");
        assert!(holder.lease_expires_at.is_some(), "{name}");

        // One run started and was swept; the id drawn for the next never became a run.
        store.create_run(new_run("run-a1", "s", 0)).unwrap();
        store
            .finish_failed("run-a1", "interrupted", RunSummary::default())
            .unwrap();
        store.claim_started_run(a, "run-a1").unwrap();
        store.claim_started_run(a, "run-never-started").unwrap();
        store
            .end_claim(
                a,
                ClaimEnd::Failed {
                    failure: "no run could be started: the store refused it",
                },
            )
            .unwrap();
        let failed = store.queue_entry(a).unwrap().unwrap();
        assert_eq!(failed.state, QueueState::Failed, "{name}");
        assert_eq!(failed.runs, ["run-a1"], "{name}: no run id without a run");
        assert_eq!(failed.claim, None, "{name}");
        assert_eq!(
            failed.failure.as_deref(),
            Some("no run could be started: the store refused it"),
            "{name}"
        );
    });
}

#[test]
fn a_queue_and_its_runs_alerts_copy_into_another_store_once() {
    // The source: a SQLite store with a done, a failed, a resolved and a claimed
    // notification, and the alert group of the done one's run.
    let dir = tempfile::tempdir().unwrap();
    let source = diag_testkit::open_sqlite(dir.path().join("source.db")).unwrap();
    let alerts = RunAlerts::new(
        AlertSource::Webhook,
        alert_group("done", AlertStatus::Firing, 0),
    );
    source.create_run(new_run("run-done", "s", 0)).unwrap();
    source.record_run_alerts("run-done", &alerts).unwrap();
    source.finish_success("run-done", summary("ok")).unwrap();
    let done = queued(source.enqueue(&firing("done"), 10).unwrap());
    let failed = queued(source.enqueue(&firing("failed"), 10).unwrap());
    queued(source.enqueue(&resolved("gone"), 10).unwrap());
    let claimed = queued(source.enqueue(&firing("claimed"), 10).unwrap());
    for (id, run) in [(done, "run-done"), (failed, "run-elsewhere")] {
        assert_eq!(source.claim().unwrap().unwrap().id, id);
        source.claim_started_run(id, run).unwrap();
    }
    source
        .end_claim(done, ClaimEnd::Investigated { run_id: "run-done" })
        .unwrap();
    source
        .end_claim(failed, ClaimEnd::Failed { failure: "gave up" })
        .unwrap();
    assert_eq!(source.claim().unwrap().unwrap().id, claimed);
    let entries = source.queue_entries().unwrap();

    for_each_backend(|name, target| {
        // The run first, as `diag store copy` does; its alerts with it, once.
        assert_eq!(
            refusal(target.import_run_alerts("run-done", &alerts).map(|_| ())),
            Kind::Invalid,
            "{name}: alerts before their run"
        );
        let whole = source.read_whole("run-done").unwrap().unwrap();
        assert!(target.import_run(&whole).unwrap(), "{name}");
        assert!(
            target.import_run_alerts("run-done", &alerts).unwrap(),
            "{name}"
        );
        assert!(
            !target.import_run_alerts("run-done", &alerts).unwrap(),
            "{name}"
        );
        assert_eq!(
            target.run_alerts("run-done").unwrap(),
            Some(alerts.clone()),
            "{name}"
        );
        target.create_run(new_run("run-live", "s", 5)).unwrap();
        assert_eq!(
            refusal(target.import_run_alerts("run-live", &alerts).map(|_| ())),
            Kind::Invalid,
            "{name}: a RUNNING run's alerts wait until it is finished"
        );

        for e in &entries {
            let copied = target.import_notification(e);
            if e.state == QueueState::Claimed {
                assert_eq!(
                    refusal(copied.map(|_| ())),
                    Kind::Invalid,
                    "{name}: a claim is not copied"
                );
            } else {
                assert!(copied.unwrap(), "{name}");
                assert!(!target.import_notification(e).unwrap(), "{name}: once");
            }
        }
        let back = target.queue_entries().unwrap();
        assert_eq!(back.len(), 3, "{name}");
        for (copy, original) in back.iter().zip(entries.iter()) {
            assert_eq!(copy.identity, original.identity, "{name}");
            assert_eq!(copy.state, original.state, "{name}");
            assert_eq!(copy.group, original.group, "{name}");
            assert_eq!(copy.receiver, original.receiver, "{name}");
            assert_eq!(copy.received_at, original.received_at, "{name}");
            assert_eq!(copy.updated_at, original.updated_at, "{name}");
            assert_eq!(copy.attempts, original.attempts, "{name}");
            assert_eq!(copy.failure, original.failure, "{name}");
        }
        assert_eq!(back[0].runs, ["run-done"], "{name}");
        assert_eq!(
            back[1].runs,
            Vec::<String>::new(),
            "{name}: a run the copy does not hold is not named"
        );
        assert_eq!(
            target.queue_counts().unwrap(),
            QueueCounts {
                done: 1,
                failed: 1,
                resolved: 1,
                ..QueueCounts::default()
            },
            "{name}"
        );
        // Nothing copied is claimable but what waited.
        assert_eq!(target.claim().unwrap(), None, "{name}");
    });
}

#[test]
fn a_claim_whose_owner_is_gone_is_taken_again_and_given_up_after_max_attempts() {
    for_each_fresh(|fresh| {
        let name = fresh.name;
        let store = fresh.open();
        let a = queued(store.enqueue(&firing("a"), 10).unwrap());
        let first = store.claim().unwrap().unwrap();
        assert_eq!((first.id, first.attempt), (a, 1), "{name}");
        store.claim_started_run(a, "run-1").unwrap();
        // Its investigator was killed on this host: taken again at once.
        fresh.execute(&format!(
            "UPDATE alert_queue SET owner_pid = {} WHERE id = {a}",
            dead_pid()
        ));
        let second = store.claim().unwrap().unwrap();
        assert_eq!((second.id, second.attempt), (a, 2), "{name}");
        assert_eq!(second.earlier_runs, ["run-1"], "{name}");
        store.claim_started_run(a, "run-2").unwrap();
        // Its investigator elsewhere stopped renewing: taken again once its lease ran out.
        fresh.execute(&format!(
            "UPDATE alert_queue SET owner_host = 'host-gone', \
             lease_expires_at = '2001-01-01T00:00:00.000Z' WHERE id = {a}"
        ));
        let third = store.claim().unwrap().unwrap();
        assert_eq!((third.id, third.attempt), (a, MAX_ATTEMPTS), "{name}");
        assert_eq!(third.earlier_runs, ["run-1", "run-2"], "{name}");
        // Stopped a third time: given up, and the next notification is claimed instead.
        let b = queued(store.enqueue(&firing("b"), 10).unwrap());
        fresh.execute(&format!(
            "UPDATE alert_queue SET owner_pid = {} WHERE id = {a}",
            dead_pid()
        ));
        assert_eq!(store.claim().unwrap().map(|c| c.id), Some(b), "{name}");
        let given_up = store.queue_entry(a).unwrap().unwrap();
        assert_eq!(given_up.state, QueueState::Failed, "{name}");
        assert_eq!(given_up.attempts, MAX_ATTEMPTS, "{name}");
        assert_eq!(given_up.runs, ["run-1", "run-2"], "{name}");
        assert_eq!(
            given_up.failure.as_deref(),
            Some("claimed 3 times without an end (its investigator stopped each time)"),
            "{name}"
        );
        assert_eq!(store.claim().unwrap(), None, "{name}");
    });
}

#[test]
fn the_heartbeat_renews_the_lease_of_a_claim_its_handle_holds() {
    for_each_fresh(|fresh| {
        let name = fresh.name;
        let store = fresh.open_with_lease(Duration::from_millis(300));
        let a = queued(store.enqueue(&firing("a"), 10).unwrap());
        // No run on this handle: the claim starts its heartbeat.
        assert_eq!(store.claim().unwrap().map(|c| c.id), Some(a), "{name}");
        let lease = || {
            fresh.query(&format!(
                "SELECT lease_expires_at FROM alert_queue WHERE id = {a}"
            ))
        };
        let taken = lease();
        assert!(!taken.is_empty(), "{name}");
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut renewed = taken.clone();
        while renewed <= taken {
            assert!(Instant::now() < deadline, "{name}: never renewed ({taken})");
            std::thread::sleep(Duration::from_millis(20));
            renewed = lease();
        }
        // A claim that ended is not renewed.
        store.end_claim(a, ClaimEnd::Released).unwrap();
        assert_eq!(lease(), "", "{name}: a released claim holds no lease");
    });
}

#[test]
fn claimants_on_three_connections_never_take_one_notification_twice() {
    for_each_fresh(|fresh| {
        let name = fresh.name;
        let stores: Vec<Store> = (0..3).map(|_| fresh.open()).collect();
        let mut all: Vec<i64> = (0..50)
            .map(|i| {
                queued(
                    stores[0]
                        .enqueue(&firing(&format!("svc-{i}")), 100)
                        .unwrap(),
                )
            })
            .collect();
        let mut claimed: Vec<i64> = std::thread::scope(|scope| {
            let workers: Vec<_> = stores
                .iter()
                .flat_map(|store| (0..3).map(move |_| store))
                .map(|store| {
                    scope.spawn(move || {
                        let mut mine = Vec::new();
                        while let Some(c) = store.claim().unwrap() {
                            mine.push(c.id);
                        }
                        mine
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        claimed.sort_unstable();
        all.sort_unstable();
        assert_eq!(
            claimed, all,
            "{name}: each notification claimed exactly once"
        );
        assert_eq!(stores[1].queue_counts().unwrap().claimed, 50, "{name}");
    });
}

#[test]
fn a_store_of_the_schema_before_alerts_upgrades_in_place() {
    for_each_fresh(|fresh| {
        let name = fresh.name;
        {
            let store = fresh.open();
            record_pass_run(&store, "run-old", "ses-1", 0);
        }
        // The store as the diag before alerts left it (SQLite 7, PostgreSQL 2): neither the
        // alerts' tables nor what later migrations added.
        fresh.execute(
            "DROP TABLE run_alert; DROP TABLE alert_queue; \
             ALTER TABLE endpoint_learning DROP COLUMN refuses_temperature; \
             ALTER TABLE endpoint_learning DROP COLUMN refuses_seed; \
             ALTER TABLE run_endpoint DROP COLUMN refuses_temperature; \
             ALTER TABLE run_endpoint DROP COLUMN refuses_seed; \
             ALTER TABLE diagnosis_run DROP COLUMN replay_of;",
        );
        fresh.set_schema_version(if fresh.is_sqlite() { 7 } else { 2 });

        let store = fresh.open();
        assert_eq!(
            fresh.stored_schema_version(),
            fresh.schema_version(),
            "{name}"
        );
        assert_eq!(
            store.get_run("run-old").unwrap().unwrap().status,
            RunStatus::Success,
            "{name}"
        );
        assert_eq!(store.run_alerts("run-old").unwrap(), None, "{name}");
        assert_eq!(store.queue_entries().unwrap(), [], "{name}");
        let a = queued(store.enqueue(&firing("a"), 1).unwrap());
        assert_eq!(store.claim().unwrap().map(|c| c.id), Some(a), "{name}");
        store.create_run(new_run("run-new", "s", 1)).unwrap();
        let alerts = RunAlerts::new(AlertSource::Webhook, firing("a").group);
        store.record_run_alerts("run-new", &alerts).unwrap();
        assert_eq!(store.run_alerts("run-new").unwrap(), Some(alerts), "{name}");
    });
}
