use serde_json::json;

use super::*;
use TokenKind::*;

fn texts(text: &str) -> Vec<(TokenKind, String)> {
    salient_tokens(text)
        .into_iter()
        .map(|t| (t.kind, t.text))
        .collect()
}

fn tok(kind: TokenKind, text: &str) -> (TokenKind, String) {
    (kind, text.to_string())
}

fn cx(strings: &[&str]) -> EvidenceContext {
    let mut cx = EvidenceContext::new();
    for s in strings {
        cx.push_text(s);
    }
    cx
}

/// The demo incident's evidence: the lines, samples and runbook text its claims bind.
fn demo() -> EvidenceContext {
    cx(&[
        "why does checkout-service return 502 since 14:00?",
        "2026-11-30T14:02:03.363Z ERROR checkout-service POST /api/checkout 502 in 5002ms: \
         upstream returned 502 from payment-service (POST /v1/charges timed out after 5000ms)",
        "2026-11-30T14:02:03.363Z",
        "fixtures/demo/logs/checkout-service.log",
        "{\"ts\": \"2026-11-30T14:02:07.250Z\", \"level\": \"error\", \"service\": \
         \"payment-service\", \"msg\": \"HikariPool-1 - Connection is not available, request \
         timed out after 5000ms (total=50, active=50, idle=0, waiting=154)\", \"route\": \
         \"POST /v1/charges\"}",
        "{\"ts\": \"2026-11-30T14:00:41.118Z\", \"level\": \"warn\", \"service\": \
         \"payment-service\", \"msg\": \"slow query: UPDATE ledger SET settled = true WHERE \
         batch_id = 'nightly-settlement' held 48 connections for 312s\", \"job\": \
         \"settlement-batch\"}",
        "callers (checkout-service) see 502 or 504 from `POST /v1/charges`, `pool_active` \
         equals `pool_max` (50)",
        "fixtures/demo/runbooks/payment-service.md",
        "120",
        "1796047800",
        "2026-11-30T14:10:00Z",
    ])
}

#[test]
fn numbers_times_dates_and_their_notations() {
    assert_eq!(
        texts("the 502s since 14:00, 5,000 ms, 48% and 312s; 0.95 of 5 s"),
        vec![
            tok(Number, "502s"),
            tok(Time, "14:00"),
            tok(Number, "5,000"),
            tok(Number, "48"),
            tok(Number, "312s"),
            tok(Number, "0.95"),
        ]
    );
    assert_eq!(texts("5 s, 1 of 3, 5s, a 5-minute window"), vec![]);
    // Something joined to a lone digit makes it a fact: a status class, a magnitude, a
    // multiplier, a decimal comma.
    assert_eq!(
        texts("2xx, 5k, 2x, 2,5"),
        vec![
            tok(Number, "2xx"),
            tok(Number, "5k"),
            tok(Number, "2x"),
            tok(Number, "2,5")
        ]
    );
    assert_eq!(
        texts("at 2:02 PM UTC on 30 November 2026, 11/30/2026 or Nov 30, 1/12/2026"),
        vec![
            tok(Time, "2:02 PM UTC"),
            tok(Date, "30 November 2026"),
            // 11/30/2026 is the same date: one token per value.
            tok(Date, "Nov 30"),
            tok(Date, "1/12/2026"),
        ]
    );
    assert_eq!(
        texts("50/50 connections, HTTP 502/504"),
        vec![tok(Number, "50"), tok(Number, "502"), tok(Number, "504")]
    );
}

#[test]
fn names_and_prose() {
    assert_eq!(
        texts(
            "the root-cause and a follow-up: payment-service/HikariPool-1 was read-only off-peak"
        ),
        vec![
            tok(Identifier, "payment-service"),
            tok(Identifier, "HikariPool-1")
        ]
    );
    assert_eq!(
        texts("billing-service and nightly-reconcile, `OOMKilled`, step #2, ticket #4411"),
        vec![
            tok(Identifier, "billing-service"),
            tok(Identifier, "nightly-reconcile"),
            tok(Identifier, "OOMKilled"),
            tok(Number, "#4411"),
        ]
    );
}

#[test]
fn honest_forms_bind() {
    let c = demo();
    for honest in [
        "The root-cause: payment-service's pool was exhausted; follow-up needed off-peak.",
        "50/50 connections were active [c3]",
        "checkout-service returned HTTP 502/504? It returned 502 [c1]",
        "payment-service/HikariPool-1 had 154 waiting [c3]",
        "At 2:02 PM UTC checkout failed [c1]",
        "At 14.02 checkout failed [c1]",
        "On 30/11/2026 at 14:02:03 [c1]",
        "On 30 November 2026 and on Nov 30 [c1]",
        "Timeouts after 5,000 ms [c1]",
        "In a 5-minute window [c2]",
        "```log\n2026-11-30T14:02:03.363Z ERROR checkout-service POST /api/checkout 502 in 5002ms\n```",
        "~~~\nPOST /api/checkout 502 in 5002ms\nHikariPool-1 - Connection is not available\n~~~",
        "The runbook says `HTTP 502` means the upstream failed [c7]",
        "Step #2 of the runbook [c7]",
        "See [c4–c6] and [the runbook](fixtures/demo/runbooks/payment-service.md).",
        "`UPDATE ledger … 'nightly-settlement'` held 48 connections for 312 s [c6]",
        "| time | what |\n| --- | --- |\n| 14:00:41 | **48** connections held |",
        "It is 14:10 on 2026-11-30.",
        "`POST /v1/charges timed out after 5000ms` [c1]",
        "`HTTP 502` from `payment-service` [c1]",
        "payment-service logged \"HikariPool-1 - Connection is not available\" [c3]",
        "the runbook: \"callers see 502 or 504\" [c7]",
        "1. a\n2. b\n3. c\n4. d\n5. e\n6. f\n7. g\n8. h\n9. i\n10. j\n11. k",
        "3. checkout failed [c1]\n4. the pool [c3]",
    ] {
        let check = c.check(honest);
        assert!(check.unbound.is_empty(), "{honest:?}: {:?}", check.unbound);
    }
}

#[test]
fn invented_shapes_are_refused() {
    let c = demo();
    for (invented, token) in [
        ("Root cause: the deploy of v2\u{200B}.3.1 [c1]", "U+200B"),
        ("at 13:\u{2060}58 [c1]", "U+2060"),
        ("settle\u{00AD}ment-batch-7 [c1]", "U+00AD"),
        ("\u{FF18}\u{FF10} connections [c3]", "80"),
        ("**8**0 connections [c3]", "80"),
        ("the job settlement\\-batch\\-7 [c1]", "settlement-batch-7"),
        (
            "~~~\nkubectl rollout undo deployment/payment-service\n~~~",
            "kubectl rollout undo deployment/payment-service",
        ),
        ("The pool was full.\n80. Every connection was busy.", "80"),
        ("80. Every connection was busy.", "80"),
        ("30 connections were busy [c3]", "30"),
        ("for 30 minutes [c3]", "30"),
        ("41 s after the batch started [c6]", "41"),
        (
            "the job [settlement-batch-7] holds them",
            "settlement-batch-7",
        ),
        ("p\u{0430}yment-service timed out", "p\u{0430}yment-service"),
        ("see <!-- v2.3.1 --> [c1]", "v2.3.1"),
        (
            "see [the runbook](https://wiki/v2.3.1) [c1]",
            "https://wiki/v2.3.1",
        ),
        ("at 3:02 PM UTC [c1]", "3:02 PM UTC"),
        ("on 05/11/2026 [c1]", "05/11/2026"),
        ("at 14:05 [c1]", "14:05"),
        ("96% of requests [c2]", "96"),
        ("`lxqdye obpon` held the pool [c3]", "lxqdye obpon"),
        (
            "`restart payment-service now` [c3]",
            "restart payment-service now",
        ),
        ("1. checkout failed [c1]\n4411. the pool [c3]", "4411"),
        ("checkout-service and **db-**1 [c1]", "db-1"),
        ("| who |\n| --- |\n| **db-**1 |", "db-1"),
        (
            "payment-service logged \"disk full on the primary\" [c3]",
            "disk full on the primary",
        ),
    ] {
        let first = c.first_unbound(invented);
        assert_eq!(
            first.as_ref().map(|t| t.text.as_str()),
            Some(token),
            "{invented:?}: {first:?}"
        );
    }
}

#[test]
fn claim_text_reads_brackets_as_text() {
    let c = demo();
    assert_eq!(
        c.first_unbound_claim("the job [settlement-batch-7] holds the pool")
            .map(|t| t.text),
        Some("settlement-batch-7".to_string())
    );
    assert_eq!(
        c.first_unbound_claim("[c1] checkout failed")
            .map(|t| t.text),
        Some("c1".to_string())
    );
    assert_eq!(c.first_unbound("[c1] checkout failed"), None);
}

#[test]
fn digit_boundaries_and_values() {
    let c = cx(&[
        "took 1500ms",
        "in 5002ms",
        "HikariPool-12",
        "at 14:02:03.363Z",
        "1.50",
    ]);
    assert_eq!(c.first_unbound("5002"), None);
    assert_eq!(c.first_unbound("1.5 s"), None);
    assert_eq!(
        c.first_unbound("50 connections").map(|t| t.text),
        Some("50".into())
    );
    assert_eq!(c.first_unbound("500").map(|t| t.text), Some("500".into()));
    assert_eq!(
        c.first_unbound("HikariPool-1").map(|t| t.text),
        Some("HikariPool-1".into())
    );
    assert_eq!(
        c.first_unbound("at 02:03").map(|t| t.text),
        Some("02:03".into())
    );
    let check = c.check("5002 and 1500 but 50 and 99");
    assert_eq!(check.checked, 4);
    assert_eq!(
        check.unbound,
        vec![
            SalientToken::new(Number, "50"),
            SalientToken::new(Number, "99")
        ]
    );
    assert_eq!(check.lines, vec![1, 1]);
}

#[test]
fn a_refusal_names_its_line() {
    let c = demo();
    let check = c.check("## Summary\n\ncheckout failed [c1]\n\n- 77 requests waited [c3]");
    assert_eq!(
        check.first().map(|u| (u.token.text, u.line)),
        Some(("77".into(), 5))
    );
}

#[test]
fn names_never_match_across_two_strings_or_inside_longer_words() {
    let c = cx(&["payment", "-service", "rebilling-service-x"]);
    assert!(c.first_unbound("payment-service").is_some());
    assert!(c.first_unbound("billing-service").is_some());
}

#[test]
fn log_match_context_is_the_match_not_the_arguments() {
    let output = json!({"matches": [
        {"file": "a.log", "line_no": 43, "timestamp": "2026-11-30T14:02:03.363Z",
         "line": "upstream returned 502"},
        {"file": "b.log", "line_no": 44, "timestamp": null, "line": "HikariPool-9 full"}],
        "matches_found": 54, "more_matches": true});
    let args = json!({"query": "502|deploy v2.3.1 at 13:58", "since": "2026-11-30T14:00:00Z"});
    let mut c = EvidenceContext::new();
    c.push_binding(&output, "/matches/0/line", &args);
    assert_eq!(c.first_unbound("502 at 14:02:03 in a.log line 43"), None);
    assert!(c.first_unbound("HikariPool-9").is_some());
    assert_eq!(
        c.first_unbound("the deploy of v2.3.1 at 13:58")
            .map(|t| t.text),
        Some("v2.3.1".into())
    );
    assert!(c.first_unbound("54 lines matched").is_some());
}

#[test]
fn a_search_binding_observes_its_figures_and_quotes_what_was_asked() {
    let output = json!({"matches": [], "matches_found": 0, "more_matches": false});
    let args = json!({"query": "OOMKilled", "since": "2026-11-30T14:00:00Z"});
    let mut c = EvidenceContext::new();
    c.push_binding(&output, "/matches_found", &args);
    assert_eq!(
        c.first_unbound_claim("no line matched `OOMKilled` since 14:00"),
        None
    );
    assert_eq!(
        c.first_unbound_claim("OOMKilled-2 killed the pod")
            .map(|t| t.text),
        Some("OOMKilled-2".into())
    );
    let found = json!({"matches": [], "matches_found": 54, "more_matches": true});
    let args = json!({"query": "502|deploy v2.3.1 at 13:58"});
    let mut c = EvidenceContext::new();
    c.push_binding(&found, "/matches_found", &args);
    assert_eq!(c.first_unbound_claim("54 lines matched"), None);
    assert_eq!(
        c.first_unbound_claim("Root cause: the deploy of v2.3.1 at 13:58")
            .map(|t| t.text),
        Some("v2.3.1".into())
    );
    assert_eq!(
        c.first_unbound_claim("a search for `v2.3.1` matched 54 lines"),
        None
    );
}

#[test]
fn metric_context_is_labels_the_sample_and_the_query_selectors() {
    let output = json!({"resultType": "matrix", "result": [
        {"metric": {"__name__": "pool_active", "service": "payment-service"},
         "values": [[1796047140, "11", "2026-11-30T13:59:00Z"],
                    [1796047200, "31", "2026-11-30T14:00:00Z"]]}]});
    let mut c = EvidenceContext::new();
    c.push_binding(
        &output,
        "/result/0/values/0/1",
        &json!({"query": "sum(pool_active{cluster=\"eu-west-1\", env!=\"dev\"})"}),
    );
    assert_eq!(
        c.first_unbound("pool_active of payment-service in eu-west-1 was 11 at 13:59"),
        None
    );
    assert_eq!(c.first_unbound("31"), Some(SalientToken::new(Number, "31")));
    assert_eq!(
        c.first_unbound("14:00"),
        Some(SalientToken::new(Time, "14:00"))
    );
    assert!(c.first_unbound("dev-1").is_some());
}

#[test]
fn other_shapes_take_the_deepest_object_and_arrays_only_along_the_path() {
    let output = json!({"content": [
        {"type": "text", "text": "disk 91% full", "meta": {"host": "db-1"},
         "rows": ["row-7"]},
        {"type": "text", "text": "node-2 ok"}]});
    let mut c = EvidenceContext::new();
    c.push_binding(&output, "/content/0/text", &json!({}));
    assert_eq!(c.first_unbound("disk 91 on db-1"), None);
    assert!(c.first_unbound("row-7").is_some());
    assert!(c.first_unbound("node-2").is_some());
    let mut now = EvidenceContext::new();
    now.push_binding(
        &json!({"now": "2026-11-30T14:10:00.000Z"}),
        "/now",
        &json!({}),
    );
    assert_eq!(now.first_unbound("it is 14:10 on 2026-11-30"), None);
}

#[test]
fn unresolvable_paths_add_nothing() {
    let mut c = EvidenceContext::new();
    c.push_binding(&json!({"a": "x-1"}), "/b", &json!({"q": "y-2"}));
    assert!(c.first_unbound("y-2").is_some());
    assert!(c.first_unbound("x-1").is_some());
}

#[test]
fn zones_convert_where_stated() {
    let c = cx(&[
        "2026-11-30T14:02:03.363Z",
        "2026-12-03 14:44:48.890 EST [24943] LOG",
    ]);
    assert_eq!(c.first_unbound("at 15:02 CET"), None);
    assert_eq!(c.first_unbound("at 9:02 AM EST"), None);
    assert_eq!(c.first_unbound("at 14:02:03+00:00"), None);
    assert!(c.first_unbound("at 14:02 CET").is_some());
    assert_eq!(c.first_unbound("at 14:44 EST"), None);
    assert_eq!(c.first_unbound("at 19:44 UTC"), None);
    assert!(c.first_unbound("at 14:44 UTC").is_some());
}

#[test]
fn a_link_whose_text_is_claim_ids_is_a_citation() {
    let ids = |text: &str| -> Vec<Vec<String>> {
        answer_markers(text).into_iter().map(|m| m.ids).collect()
    };
    assert_eq!(ids("the pool was full [c3](#c3)"), [vec!["c3".to_string()]]);
    assert_eq!(
        ids("see [c1, c2](#c1)"),
        [vec!["c1".to_string(), "c2".to_string()]]
    );
    // A link with other text is not; its destination is content.
    assert!(ids("see [the runbook](#c1)").is_empty());
    let c = demo();
    assert!(c.check("the pool was full [c3](#c3)").unbound.is_empty());
    assert_eq!(
        c.first_unbound("see [c3](#v2.3.1)").map(|t| t.text),
        Some("#v2.3.1".to_string())
    );
}

#[test]
fn an_invisible_character_spelled_as_an_entity_is_read_after_decoding() {
    // A report decodes `&#x200B;` to a zero-width space: its reader sees `80`.
    let c = demo();
    for (written, token) in [
        ("HikariPool-1 had 8&#x200B;0 connections [c3]", "U+200B"),
        ("payment-service v2&#8203;.3.1 [c1]", "U+200B"),
        ("deployed at 13&shy;:58 [c1]", "U+00AD"),
        ("the pool was full [c3]\n\n8&#x2060;0 waiting", "U+2060"),
    ] {
        let first = c.first_unbound(written);
        assert_eq!(
            first.as_ref().map(|t| (t.kind, t.text.as_str())),
            Some((Invisible, token)),
            "{written:?}"
        );
        assert_eq!(
            claim_tokens(written).first().map(|t| t.kind),
            Some(Invisible)
        );
    }
    assert_eq!(
        read::read_markdown("ok\n\n8&#x200B;0")
            .invisible
            .unwrap()
            .line,
        3
    );
    // Decoded where it changes no token (between spaces, a byte-order mark, a joiner inside
    // an emoji sequence), it is dropped as in the source; other entities read as before.
    for honest in [
        "50 &#x200B; connections [c3]",
        "&#xFEFF;50 connections [c3]",
        "\u{1F468}&#x200D;\u{1F469} 50 connections [c3]",
        "HikariPool-1 &amp; payment-service: &#53;0 of 50 [c3]",
    ] {
        assert_eq!(c.first_unbound(honest), None, "{honest:?}");
    }
}

/// The shapes a reader takes for facts though no listed fact shape matched them before:
/// each is refused over the demo evidence, naming its kind and text, and its honest twin
/// (the same sentence with the observed value) passes.
#[test]
fn default_deny_shapes_are_refused_and_their_twins_pass() {
    let c = demo();
    for (invented, kind, token, honest) in [
        (
            "HikariPool-1 held eighty connections [c3]",
            Number,
            "eighty",
            "HikariPool-1 held fifty connections [c3]",
        ),
        (
            "fifty-five requests waited [c3]",
            Number,
            "fifty-five",
            "fifty connections were active [c3]",
        ),
        (
            "since a quarter past two [c1]",
            Time,
            "a quarter past two",
            "since two o'clock [c1]",
        ),
        (
            "50\u{202F}154 requests waited [c3]",
            Number,
            "50 154",
            "154 requests waited [c3]",
        ),
        (
            "50'154 requests waited [c3]",
            Number,
            "50'154",
            "154 requests waited [c3]",
        ),
        (
            "50\u{2019}154 requests waited [c3]",
            Number,
            "50\u{2019}154",
            "154 requests waited [c3]",
        ),
        (
            "gave up after 2,5 s [c1]",
            Number,
            "2,5",
            "gave up after 5 s [c1]",
        ),
        (
            "gave up after 4,9 s [c1]",
            Number,
            "4,9",
            "gave up after 5,000 ms [c1]",
        ),
        (
            "154k requests waited [c3]",
            Number,
            "154k",
            "154 requests waited [c3]",
        ),
        (
            "traffic was 50x the usual [c3]",
            Number,
            "50x",
            "50 of 50 were active [c3]",
        ),
        (
            "HikariPool-1 held 8O connections [c3]",
            Identifier,
            "8O",
            "held 50 [c3]",
        ),
        (
            "HikariPool-1 held 8\u{332}0 connections [c3]",
            Identifier,
            "8\u{332}0",
            "held 50 [c3]",
        ),
        (
            "it logged \u{2018}disk full on the primary replica\u{2019} [c3]",
            Quoted,
            "disk full on the primary replica",
            "it logged \u{2018}upstream returned 502 from payment-service\u{2019} [c1]",
        ),
        (
            "it logged \u{AB}disk full on the primary replica\u{BB} [c3]",
            Quoted,
            "disk full on the primary replica",
            "it logged \u{AB}upstream returned 502 from payment-service\u{BB} [c1]",
        ),
        (
            "it logged \u{201E}disk full on the primary replica\u{201C} [c3]",
            Quoted,
            "disk full on the primary replica",
            "it logged \u{201E}upstream returned 502 from payment-service\u{201C} [c1]",
        ),
        (
            "it logged \"disk full on the\nprimary replica\" [c3]",
            Quoted,
            "disk full on the primary replica",
            "it logged \"upstream returned 502\nfrom payment-service\" [c1]",
        ),
        (
            "it logged \"disk full on the  \nprimary replica\" [c3]",
            Quoted,
            "disk full on the primary replica",
            "it logged \"upstream returned 502  \nfrom payment-service\" [c1]",
        ),
        (
            "payment-service said [c3]:\n\n> disk full on the primary replica, writes rejected",
            Quoted,
            "disk full on the primary replica, writes rejected",
            "payment-service said [c3]:\n\n> HikariPool-1 - Connection is not available",
        ),
        (
            "the first 502 came at 14:02 UTC+8 [c1]",
            Time,
            "14:02 UTC+8",
            "at 22:02 UTC+8 [c1]",
        ),
        (
            "at 2:02 PM GMT+9 [c1]",
            Time,
            "2:02 PM GMT+9",
            "at 11:02 PM GMT+9 [c1]",
        ),
        ("at 14:02 ET [c1]", Time, "14:02 ET", "at 14:02 UTC [c1]"),
        (
            "at 14:02 (PST) [c1]",
            Time,
            "14:02 PST",
            "at 14:02 (UTC) [c1]",
        ),
        ("at 14:02 XYZT [c1]", Time, "14:02 XYZT", "at 14:02 [c1]"),
        ("since Sunday [c1]", Date, "Sunday", "since Monday [c1]"),
        (
            "since the 16th of November [c1]",
            Date,
            "16th of November",
            "since the 30th of November [c1]",
        ),
        (
            "in December 2026 [c1]",
            Date,
            "December 2026",
            "in November 2026 [c1]",
        ),
        ("it retried twice [c1]", Number, "twice", "it retried [c1]"),
        (
            "hundreds of requests waited [c3]",
            Number,
            "hundreds",
            "154 requests waited [c3]",
        ),
        (
            "IOO requests waited [c3]",
            Identifier,
            "IOO",
            "154 requests waited [c3]",
        ),
        (
            "\u{2167} requests waited [c3]",
            Identifier,
            "\u{2167}",
            "154 requests waited [c3]",
        ),
        (
            "checkout failed yesterday [c1]",
            Date,
            "yesterday",
            "checkout failed [c1]",
        ),
        (
            "it held 50 thousand rows [c6]",
            Number,
            "50 thousand",
            "it held 48 [c6]",
        ),
        (
            "billing\u{B7}service timed out [c1]",
            Identifier,
            "billing\u{B7}service",
            "payment-service timed out [c1]",
        ),
        (
            "billing\u{2011}service timed out [c1]",
            Identifier,
            "billing-service",
            "payment\u{2011}service timed out [c1]",
        ),
        (
            "the LedgerDB was down [c1]",
            Identifier,
            "LedgerDB",
            "the ledger was down [c6]",
        ),
        (
            "LXXX connections were busy [c3]",
            Number,
            "LXXX",
            "L connections [c3]",
        ),
        (
            "half the pool was idle [c3]",
            Number,
            "half",
            "the pool was busy [c3]",
        ),
        (
            "latency doubled [c1]",
            Number,
            "doubled",
            "latency grew [c1]",
        ),
        (
            "ochenta conexiones [c3]",
            Number,
            "ochenta",
            "cincuenta conexiones [c3]",
        ),
        (
            "at 14:02 UTC +8 [c1]",
            Time,
            "14:02 UTC 8",
            "at 22:02 UTC +8 [c1]",
        ),
        (
            "at 14:02 local time [c1]",
            Time,
            "14:02 local",
            "at 14:02 UTC [c1]",
        ),
        (
            "at 14:02 Pacific [c1]",
            Time,
            "14:02 Pacific",
            "at 14:02 UTC [c1]",
        ),
        ("at PST 14:02 [c1]", Time, "PST 14:02", "at UTC 14:02 [c1]"),
        (
            "\u{1F51F} connections [c3]",
            Number,
            "10",
            "50 connections [c3]",
        ),
        (
            "\u{8FDE}\u{63A5}\u{6C60}\u{6709}\u{516B}\u{5341}\u{4E2A}\u{8FDE}\u{63A5} [c3]",
            Number,
            "\u{516B}\u{5341}",
            "\u{8FDE}\u{63A5}\u{6C60}\u{6709}\u{4E94}\u{5341}\u{4E2A}\u{8FDE}\u{63A5} [c3]",
        ),
        (
            "billing-service\u{304C}502\u{3092}\u{8FD4}\u{3057}\u{305F} [c1]",
            Identifier,
            "billing-service",
            "checkout-service\u{304C}502\u{3092}\u{8FD4}\u{3057}\u{305F} [c1]",
        ),
    ] {
        let first = c.first_unbound(invented);
        assert_eq!(
            first.as_ref().map(|t| (t.kind, t.text.as_str())),
            Some((kind, token)),
            "{invented:?}"
        );
        // In a claim the citation is text and may be named first.
        let claimed = c.first_unbound_claim(invented);
        assert!(
            claimed
                .as_ref()
                .is_some_and(|t| t.kind == kind || t.text.starts_with('c')),
            "{invented:?} as a claim: {claimed:?}"
        );
        assert_eq!(c.first_unbound(honest), None, "{honest:?}");
    }
}

#[test]
fn honest_forms_of_dates_numbers_and_quotations_pass() {
    let c = demo();
    for honest in [
        "On the 30th of November checkout-service answered 502 [c1]",
        "In November 2026 checkout-service answered 502 [c1]",
        "On Nov 30 checkout-service answered 502 [c1]",
        "El 30 de noviembre de 2026 checkout-service respondi\u{F3} 502 [c1]",
        "Am 30. November 2026 um 14:02:03 [c1]",
        "On Monday, 30 November 2026 [c1]",
        "fifty of fifty connections were active and 154 waited [c3]",
        "1\u{FE0F}\u{20E3} Pause the settlement-batch cron [c7]\n2\u{FE0F}\u{20E3} Check the pool [c3]",
        "it logged \u{300C}upstream returned 502\u{300D} [c1]",
        "the first 502 at 14:02:03 (UTC) [c1]",
        "checkout-service returned 5xx errors [c1]",
        "we'll pause the batch; I/O was fine [c7]",
        "checkout-service\u{304C}14:02:03\u{304B}\u{3089}502\u{3092}\u{8FD4}\u{3057}\u{3066}\u{3044}\u{308B} [c1]",
        "checkout-service\u{304C}14:02:03\u{304B}\u{3089}502\u{3092}\u{8FD4}\u{3057}\u{3066}\u{3044}\u{308B} [c1]",
        "At two o'clock the batch started [c5]",
    ] {
        let check = c.check(honest);
        assert!(check.unbound.is_empty(), "{honest:?}: {:?}", check.unbound);
    }
}

#[test]
fn a_verifier_item_with_a_zone_is_dropped() {
    let c = demo();
    assert_eq!(
        c.first_unbound_claim("Confirm the clock of payment-service is on UTC+8")
            .map(|t| (t.kind, t.text)),
        Some((Identifier, "UTC+8".to_string()))
    );
    assert_eq!(
        c.first_unbound_claim("Check the pool again at 14:02 UTC+8")
            .map(|t| (t.kind, t.text)),
        Some((Time, "14:02 UTC+8".to_string()))
    );
}
