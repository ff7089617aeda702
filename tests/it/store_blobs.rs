//! Content-addressed request storage: the large parts of model requests stored once per
//! store by sha256, rebuilt byte for byte, verified on read, released by gc, and the
//! migration of a store of the first schema.

use crate::support::cli_env::{repo_file, TestEnv};
use diag_testkit::records;

use diag_core::agent::AgentRole;
use diag_core::hash::{canonical_request, request_sha256};
use diag_core::model::{ChatRequest, Message};
use diag_core::store::{RunFilter, Store, StoreErrorKind};
use diag_store_sqlite::{SqliteStore, SCHEMA_VERSION};
use records::*;

fn temp() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("diag.db");
    (dir, path)
}

fn count(path: &std::path::Path, sql: &str) -> i64 {
    raw(path).query_row(sql, [], |r| r.get(0)).unwrap()
}

/// A request whose history grows turn by turn, as the Executor's does: the system prompt,
/// the tool catalog and every earlier message are sent again.
fn growing_request(turn: usize, unique: &str) -> ChatRequest {
    let mut req = request(AgentRole::Executor, "{\"question\":\"why 502?\"}");
    for t in 1..turn {
        req.messages.push(Message::user(format!(
            "tool output of turn {t}: {}",
            "upstream returned 502 ".repeat(20)
        )));
    }
    req.messages.push(Message::user(format!(
        "{unique} turn {turn} {}",
        "x".repeat(300)
    )));
    req
}

/// Stores a finished run with one exchange per request.
fn store_run(store: &Store, run_id: &str, requests: &[ChatRequest]) {
    store.create_run(new_run(run_id, "s", 0)).unwrap();
    for (i, req) in requests.iter().enumerate() {
        let mut ex = exchange_ok(AgentRole::Executor, i as u32 + 1);
        ex.request = req.clone();
        store.record_exchange(run_id, &ex).unwrap();
    }
    store.finish_success(run_id, summary("an answer")).unwrap();
}

#[test]
fn repeated_request_parts_are_stored_once_and_rebuilt_byte_identically() {
    let (_dir, path) = temp();
    let store = diag_testkit::open_sqlite(&path).unwrap();
    let first: Vec<ChatRequest> = (1..=3).map(|t| growing_request(t, "run-a")).collect();
    let second: Vec<ChatRequest> = (1..=3).map(|t| growing_request(t, "run-b")).collect();
    store_run(&store, "run-a", &first);
    store_run(&store, "run-b", &second);

    for (run_id, requests) in [("run-a", &first), ("run-b", &second)] {
        let stored = store.exchanges(run_id).unwrap();
        assert_eq!(stored.len(), requests.len());
        for (s, req) in stored.iter().zip(requests.iter()) {
            assert_eq!(&s.exchange.request, req);
            assert_eq!(s.request_sha256, request_sha256(req).unwrap());
        }
    }
    // Shared by both runs: the system prompt and the two history messages; then each run's
    // own last message (one per request, six in all). The test catalog is under the blob
    // size and stays in the skeleton.
    assert_eq!(count(&path, "SELECT count(*) FROM blob"), 1 + 2 + 6);
    assert_eq!(
        count(&path, "SELECT count(DISTINCT sha256) FROM blob"),
        count(&path, "SELECT count(*) FROM blob")
    );
    assert_blob_refs_exact(&path);
    // The rows keep only the small skeleton of each request.
    let skeleton = count(&path, "SELECT max(length(request)) FROM model_exchange");
    let whole = canonical_request(&first[2]).unwrap().len() as i64;
    assert!(skeleton < 512, "skeleton of {skeleton} bytes");
    assert!(whole > 4 * 1024, "the request itself is {whole} bytes");
    // A request without large parts is stored whole, with no blob reference.
    let mut small = ChatRequest::new(vec![Message::user("hi")]);
    small.max_tokens = Some(10);
    store_run(&store, "run-c", std::slice::from_ref(&small));
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM model_exchange WHERE run_id = 'run-c' AND request_blobs IS NULL"
        ),
        1
    );
    assert_eq!(store.exchanges("run-c").unwrap()[0].exchange.request, small);
}

#[test]
fn a_changed_blob_or_skeleton_fails_closed_with_a_store_error() {
    let (_dir, path) = temp();
    let store = diag_testkit::open_sqlite(&path).unwrap();
    store_run(&store, "run-a", &[growing_request(2, "a")]);
    store.exchanges("run-a").unwrap();

    // A blob whose text changed (still valid JSON of the same shape).
    let conn = raw(&path);
    let changed = conn
        .execute(
            "UPDATE blob SET body = replace(body, 'upstream', 'Upstream') \
             WHERE body LIKE '%upstream returned%'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let err = store.exchanges("run-a").unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err:?}");
    assert!(
        err.to_string()
            .contains("does not match its request_sha256"),
        "{err}"
    );
    conn.execute(
        "UPDATE blob SET body = replace(body, 'Upstream', 'upstream')",
        [],
    )
    .unwrap();
    store.exchanges("run-a").unwrap();

    // A skeleton whose reference points past its end, or at a blob that is not there.
    conn.execute(
        "UPDATE model_exchange SET request_blobs = '[[100000,1]]'",
        [],
    )
    .unwrap();
    assert_eq!(
        store.exchanges("run-a").unwrap_err().kind(),
        StoreErrorKind::Corrupt
    );
    conn.execute("UPDATE model_exchange SET request_blobs = '[[0,999]]'", [])
        .unwrap();
    let err = store.exchanges("run-a").unwrap_err();
    assert!(err.to_string().contains("blob 999 is missing"), "{err}");
    // A request stored whole is checked against its hash too.
    conn.execute(
        "UPDATE model_exchange SET request = '{}', request_blobs = NULL",
        [],
    )
    .unwrap();
    assert_eq!(
        store.exchanges("run-a").unwrap_err().kind(),
        StoreErrorKind::Corrupt
    );
}

#[test]
fn gc_deletes_the_blobs_no_run_refers_to_and_keeps_the_shared_ones() {
    let (_dir, path) = temp();
    let store = diag_testkit::open_sqlite(&path).unwrap();
    for run in ["run-1", "run-2", "run-3"] {
        store_run(&store, run, &[growing_request(2, run)]);
    }
    // the prompt and one history message, shared, and one own message per run
    assert_eq!(count(&path, "SELECT count(*) FROM blob"), 2 + 3);
    assert_blob_refs_exact(&path);

    let report = store.gc(None, Some(1)).unwrap();
    assert_eq!(report.runs_deleted, 2);
    assert_eq!(count(&path, "SELECT count(*) FROM blob"), 2 + 1);
    assert_blob_refs_exact(&path);
    let kept = store.exchanges("run-3").unwrap();
    assert_eq!(kept[0].exchange.request, growing_request(2, "run-3"));

    // An exchange refused on its own rolls its blobs back with it.
    let mut late = exchange_ok(AgentRole::Executor, 9);
    late.request = growing_request(2, "late");
    assert_eq!(
        store.record_exchange("run-3", &late).unwrap_err().kind(),
        StoreErrorKind::WrongState
    );
    assert_eq!(count(&path, "SELECT count(*) FROM blob"), 2 + 1);
    // A model call whose rows are refused one by one commits what it wrote: the blobs of
    // its refused exchange stay unnamed until the next gc.
    let errors = store.record_model_call(
        "run-3",
        &step(
            AgentRole::Executor,
            9,
            diag_core::agent::runtime::StepStatus::Ok,
        ),
        &late,
    );
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(count(&path, "SELECT count(*) FROM blob"), 2 + 2);
    store.gc(None, None).unwrap();
    assert_eq!(count(&path, "SELECT count(*) FROM blob"), 2 + 1);

    store.gc(None, Some(0)).unwrap();
    assert_eq!(count(&path, "SELECT count(*) FROM blob"), 0);
    assert_eq!(count(&path, "SELECT count(*) FROM blob_ref"), 0);
    assert_eq!(
        SqliteStore::open(&path).unwrap().integrity_check().unwrap(),
        "ok"
    );
}

/// Inserts a finished run with these request texts the way the first schema's store wrote
/// them: each text whole in `model_exchange.request`, beside its sha256.
fn insert_v1_run(conn: &rusqlite::Connection, run_id: &str, texts: &[String]) {
    conn.execute(
        "INSERT OR IGNORE INTO tool_catalog (sha256, catalog) VALUES ('c', '[]')",
        [],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO diagnosis_run (run_id, session_id, question, status, answer, started_at, \
         finished_at, tools_sha256, owner_pid, created_at) VALUES (?1, 's', 'q', 'SUCCESS', \
         'a', '2026-11-30T14:00:00.000Z', '2026-11-30T14:00:01.000Z', 'c', 1, \
         '2026-11-30T14:00:00.000Z')",
        [run_id],
    )
    .unwrap();
    for (i, text) in texts.iter().enumerate() {
        conn.execute(
            "INSERT INTO model_exchange (run_id, seq, agent, round, attempt, turn, request, \
             request_sha256, response, error) VALUES (?1, ?2, 'executor', 1, 1, ?2, ?3, ?4, \
             NULL, '{\"class\":\"transient\",\"message\":\"m\"}')",
            rusqlite::params![
                run_id,
                i as i64 + 1,
                text,
                diag_core::hash::sha256_hex(text.as_bytes())
            ],
        )
        .unwrap();
    }
}

#[test]
fn the_migration_converts_a_store_of_the_first_schema_keeping_every_request_byte_identical() {
    let (_dir, path) = temp();
    SqliteStore::create_at_schema_version(&path, 1).unwrap();
    assert_eq!(
        count(&path, "SELECT user_version FROM pragma_user_version"),
        1
    );
    // Canonical texts as today's code writes them, and texts in other spellings (spaces,
    // key order, escapes, number forms) that a re-serialization would not reproduce.
    let canonical: Vec<String> = (1..=3)
        .map(|t| canonical_request(&growing_request(t, "old")).unwrap())
        .collect();
    let big = "a \\u00e9 \\\"quoted\\\" é ".repeat(30);
    let odd = vec![
        format!(
            "{{ \"tools\" : [ {{\"name\":\"{big}\"}} ], \"messages\":[{{\"role\":\"system\",\
             \"content\":\"{big}\"}} , {{\"content\":\"hi\",\"role\":\"user\"}}],\
             \"temperature\":2.0e-1, \"max_tokens\":1024 }}"
        ),
        canonical[0].replace("\"max_tokens\":1024", "\"max_tokens\":1.024e3"),
    ];
    {
        let conn = raw(&path);
        insert_v1_run(&conn, "run-old-1", &canonical);
        insert_v1_run(&conn, "run-old-2", &canonical[..1]);
        insert_v1_run(&conn, "run-odd", &odd);
    }
    let before: Vec<(String, i64, String)> = rows(
        &raw(&path),
        "SELECT run_id, seq, request FROM model_exchange ORDER BY run_id, seq",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    );

    let store = diag_testkit::open_sqlite(&path).unwrap();
    assert_eq!(
        count(&path, "SELECT user_version FROM pragma_user_version"),
        i64::from(SCHEMA_VERSION)
    );
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM model_exchange WHERE request_blobs IS NULL"
        ),
        0,
        "every exchange was converted"
    );
    assert_blob_refs_exact(&path);
    // The exchanges of the canonical runs read back as the requests they were.
    for (run_id, n) in [("run-old-1", 3), ("run-old-2", 1)] {
        let stored = store.exchanges(run_id).unwrap();
        assert_eq!(stored.len(), n);
        for (s, t) in stored.iter().zip(1..) {
            assert_eq!(s.exchange.request, growing_request(t, "old"));
        }
    }
    // Every text rebuilds to its exact bytes: the read checks each against its sha256 (a
    // request whose JSON the model types cannot read would fail decoding, not the check).
    for (run_id, seq, text) in &before {
        let skeleton: String = raw(&path)
            .query_row(
                "SELECT request FROM model_exchange WHERE run_id = ?1 AND seq = ?2",
                rusqlite::params![run_id, seq],
                |r| r.get(0),
            )
            .unwrap();
        assert!(skeleton.len() < text.len(), "{run_id}/{seq} was cut");
    }
    let rebuilt: Vec<String> = before
        .iter()
        .map(|(run_id, seq, _)| request_text(&path, run_id, *seq))
        .collect();
    let texts: Vec<String> = before.iter().map(|(_, _, t)| t.clone()).collect();
    assert_eq!(rebuilt, texts, "byte-identical after the migration");
    // Shared across the two canonical runs: stored once.
    assert_eq!(
        count(&path, "SELECT count(DISTINCT sha256) FROM blob"),
        count(&path, "SELECT count(*) FROM blob")
    );
    drop(store);
    // Opening again migrates nothing more.
    diag_testkit::open_sqlite(&path).unwrap();
    assert_blob_refs_exact(&path);
}

/// Copies every row and column a store of schema `version` (before request blobs) has from
/// `from` (a store of this build) into `to` (a new store of that version), each exchange's
/// request as the whole text it is: the store a diag of that version would have written for
/// the same runs.
fn copy_to_schema(from: &std::path::Path, to: &std::path::Path, version: u32) {
    SqliteStore::create_at_schema_version(to, version).unwrap();
    let conn = raw(to);
    conn.execute("ATTACH DATABASE ?1 AS cur", [from.display().to_string()])
        .unwrap();
    let tables: Vec<String> = rows(
        &conn,
        "SELECT name FROM main.sqlite_schema WHERE type = 'table' \
         ORDER BY name = 'tool_catalog' DESC, name = 'diagnosis_run' DESC, name",
        [],
        |r| r.get(0),
    );
    assert!(tables.contains(&"model_exchange".to_string()));
    // Before version 4 requests were stored whole.
    let whole_requests = version < 4;
    assert_eq!(
        tables.contains(&"blob".to_string()),
        !whole_requests,
        "{tables:?}"
    );
    for table in &tables {
        let columns: Vec<String> = rows(
            &conn,
            "SELECT name FROM main.pragma_table_info(?1)",
            [table],
            |r| r.get(0),
        );
        let columns = columns.join(", ");
        let order = if table == "diagnosis_run" {
            " ORDER BY rowid"
        } else {
            ""
        };
        // The exchanges' insert trigger counts the references again.
        let values = if table == "blob_ref" {
            "id, 0".to_string()
        } else {
            columns.clone()
        };
        conn.execute(
            &format!(
                "INSERT INTO main.{table} ({columns}) SELECT {values} FROM cur.{table}{order}"
            ),
            [],
        )
        .unwrap();
    }
    let store = diag_testkit::open_sqlite(from).unwrap();
    for run in store
        .list_runs(&RunFilter::default())
        .unwrap()
        .into_iter()
        .filter(|_| whole_requests)
    {
        for s in store.exchanges(&run.run_id).unwrap() {
            let text = canonical_request(&s.exchange.request).unwrap();
            assert_eq!(
                diag_core::hash::sha256_hex(text.as_bytes()),
                s.request_sha256
            );
            conn.execute(
                "UPDATE main.model_exchange SET request = ?3 WHERE run_id = ?1 AND seq = ?2",
                rusqlite::params![run.run_id, s.seq, text],
            )
            .unwrap();
        }
    }
    // Texts this build stored compressed go back whole, as the older schema kept them; a
    // response was compressed against its request's text, a self-evaluation against the
    // answer.
    let mut requests: std::collections::HashMap<(String, i64), String> = Default::default();
    let mut answers: std::collections::HashMap<String, String> = Default::default();
    for run in store.list_runs(&RunFilter::default()).unwrap() {
        answers.insert(run.run_id.clone(), run.answer.clone().unwrap_or_default());
        for x in store.exchanges(&run.run_id).unwrap() {
            let text = canonical_request(&x.exchange.request).unwrap();
            requests.insert((run.run_id.clone(), i64::from(x.seq)), text);
        }
    }
    // Each table with the column that, with `run_id`, keys its rows.
    for (table, key, text) in [
        ("model_exchange", "seq", "response"),
        ("tool_invocation", "invocation_id", "output"),
        ("diagnosis_run", "run_id", "answer"),
        ("diagnosis_run", "run_id", "self_evaluation"),
    ] {
        let packed: Vec<(String, rusqlite::types::Value, Vec<u8>)> = rows(
            &conn,
            &format!(
                "SELECT run_id, {key}, {text}_zstd FROM cur.{table} \
                 WHERE {text}_zstd IS NOT NULL"
            ),
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        );
        assert!(
            !packed.is_empty(),
            "no {table}.{text} was stored compressed"
        );
        for (run_id, key_value, frame) in packed {
            let dictionary = match (text, &key_value) {
                ("response", rusqlite::types::Value::Integer(seq)) => {
                    requests[&(run_id.clone(), *seq)].as_bytes()
                }
                ("self_evaluation", _) => answers[&run_id].as_bytes(),
                _ => &[],
            };
            let mut whole = String::new();
            std::io::Read::read_to_string(
                &mut zstd::stream::read::Decoder::with_dictionary(frame.as_slice(), dictionary)
                    .unwrap(),
                &mut whole,
            )
            .unwrap();
            let changed = conn
                .execute(
                    &format!(
                        "UPDATE main.{table} SET {text} = ?3 WHERE run_id = ?1 AND {key} = ?2"
                    ),
                    rusqlite::params![run_id, key_value, whole],
                )
                .unwrap();
            assert_eq!(changed, 1);
        }
    }
    conn.execute("DETACH DATABASE cur", []).unwrap();
}

/// What `trace`, `trace --json` and `export` print for every run of the store `db`.
fn outputs(env: &TestEnv, db: &std::path::Path, runs: &[String]) -> Vec<String> {
    let db = db.display().to_string();
    let mut out = Vec::new();
    for run in runs {
        for args in [
            vec!["--db", &db, "trace", run],
            vec!["--db", &db, "trace", run, "--json"],
            vec!["--db", &db, "export", run],
        ] {
            let o = env.run(&args);
            o.expect(0);
            out.push(o.stdout);
        }
    }
    out
}

#[test]
fn migrating_a_store_of_replayed_fixtures_keeps_every_trace_and_export_byte_identical() {
    let env = TestEnv::new();
    let fixtures = repo_file("fixtures").display().to_string();
    let replayed = env.run(&["replay", &fixtures]);
    replayed.expect(0);
    let current = env.db();
    let runs: Vec<String> = rows(
        &raw(&current),
        "SELECT run_id FROM diagnosis_run ORDER BY rowid",
        [],
        |r| r.get(0),
    );
    assert!(runs.len() >= 40, "{} runs replayed", runs.len());
    let expected = outputs(&env, &current, &runs);
    assert_eq!(expected.len(), runs.len() * 3);
    let request_bytes =
        |p: &std::path::Path| count(p, "SELECT sum(length(request)) FROM model_exchange");
    // The schema just before compressed texts (version 5), the one before request blobs, and
    // the first schema (before limits and resumed runs were kept).
    for version in [4, 3, 1] {
        let old = env.root().join(format!("schema-{version}.db"));
        copy_to_schema(&current, &old, version);
        assert_eq!(
            count(&old, "SELECT user_version FROM pragma_user_version"),
            i64::from(version)
        );
        assert_eq!(
            count(&old, "SELECT count(*) FROM model_exchange"),
            count(&current, "SELECT count(*) FROM model_exchange")
        );
        if version < 4 {
            assert!(request_bytes(&old) > 10 * request_bytes(&current));
        }

        // The first command on the old file migrates it.
        let migrated = outputs(&env, &old, &runs);
        assert_eq!(
            count(&old, "SELECT user_version FROM pragma_user_version"),
            i64::from(SCHEMA_VERSION)
        );
        for (i, (e, m)) in expected.iter().zip(&migrated).enumerate() {
            let export = i % 3 == 2;
            if version == 1 && export {
                // The first schema kept no limits: the export is the same run file without
                // them, and nothing else differs.
                let mut e: serde_json::Value = serde_json::from_str(e).unwrap();
                let m: serde_json::Value = serde_json::from_str(m).unwrap();
                e.as_object_mut().unwrap().remove("limits");
                assert!(m.get("limits").is_none());
                assert!(
                    e == m,
                    "export {i} (run {}) differs after the migration",
                    runs[i / 3]
                );
            } else {
                assert!(
                    e == m,
                    "output {i} (run {}) of schema {version} differs after the migration",
                    runs[i / 3]
                );
            }
        }
        assert_eq!(request_bytes(&old), request_bytes(&current));
        assert_blob_refs_exact(&old);
    }
}

/// The large texts of a run (responses, tool outputs, answer, self-evaluation) are stored
/// compressed and read back exactly (the migration test above compares every trace and
/// export with a store that keeps them whole); a damaged frame fails the read in one line,
/// never reaching the output.
#[test]
fn large_run_texts_are_stored_compressed_and_a_damaged_frame_fails_closed() {
    let env = TestEnv::new();
    let incident = repo_file("fixtures/incident-checkout-502.json")
        .display()
        .to_string();
    env.run(&["replay", &incident]).expect(0);
    let db = env.db();
    let run_id: String = raw(&db)
        .query_row("SELECT run_id FROM diagnosis_run", [], |r| r.get(0))
        .unwrap();
    for (table, text, packed) in [
        ("model_exchange", "response", "response_zstd"),
        ("tool_invocation", "output", "output_zstd"),
        ("diagnosis_run", "answer", "answer_zstd"),
        ("diagnosis_run", "self_evaluation", "self_evaluation_zstd"),
    ] {
        assert!(
            count(
                &db,
                &format!("SELECT count(*) FROM {table} WHERE {packed} IS NOT NULL")
            ) > 0,
            "{table}.{text} is stored compressed"
        );
        assert_eq!(
            count(
                &db,
                &format!(
                    "SELECT count(*) FROM {table} WHERE {packed} IS NOT NULL AND {text} <> ''"
                )
            ),
            0,
            "{table}: a compressed text is not kept twice"
        );
    }
    let trace = env.run(&["trace", &run_id, "--json"]);
    trace.expect(0);
    let answer = trace.json()["run"]["answer"].as_str().unwrap().to_string();
    assert!(answer.contains("settlement-batch"), "{answer}");

    // A response frame that lost its tail: trace and export fail naming the exchange.
    raw(&db)
        .execute(
            "UPDATE model_exchange SET response_zstd = substr(response_zstd, 1, 20) \
             WHERE response_zstd IS NOT NULL",
            [],
        )
        .unwrap();
    for args in [
        vec!["trace", run_id.as_str(), "--json"],
        vec!["export", run_id.as_str()],
    ] {
        let out = env.run(&args);
        assert_ne!(out.code, Some(0), "{args:?} printed {}", out.stdout);
        let line = out.one_error_line();
        assert!(line.contains("the response of model exchange"), "{line}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
    }
    // Without the exchanges, what is read is the tool outputs.
    raw(&db).execute("DELETE FROM model_exchange", []).unwrap();
    raw(&db)
        .execute(
            "UPDATE tool_invocation SET output_zstd = substr(output_zstd, 1, 20) \
             WHERE output_zstd IS NOT NULL",
            [],
        )
        .unwrap();
    for args in [
        vec!["trace", run_id.as_str()],
        vec!["trace", run_id.as_str(), "--json"],
        vec!["export", run_id.as_str()],
    ] {
        let out = env.run(&args);
        assert_ne!(out.code, Some(0), "{args:?} printed {}", out.stdout);
        let line = out.one_error_line();
        assert!(line.contains("tool output"), "{line}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
    }
}
