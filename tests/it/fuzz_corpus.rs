//! Every file of the cargo-fuzz corpus (`fuzz/corpus/<target>/*`) through the checks its
//! fuzz target runs (`fuzz/src/lib.rs`, included here), on the stable toolchain: no panic, and
//! the seeds give the result they were written for. `scripts/test` also type-checks the fuzz
//! crate itself, so neither the targets nor their corpus can rot unnoticed.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use diag_runfile::RunFileError;

#[path = "../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod checks;

fn fuzz_dir() -> PathBuf {
    diag_testkit::repo().join("fuzz")
}

/// The corpus of one target: file name → bytes.
fn corpus(target: &str) -> BTreeMap<String, Vec<u8>> {
    let dir = fuzz_dir().join("corpus").join(target);
    let files: BTreeMap<String, Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    assert!(!files.is_empty(), "{}: empty corpus", dir.display());
    files
}

/// Runs `check` on every corpus file of `target`, naming the file that panics.
fn run_corpus<T>(target: &str, check: fn(&[u8]) -> T) -> BTreeMap<String, T> {
    corpus(target)
        .into_iter()
        .map(|(name, data)| {
            let out = catch_unwind(AssertUnwindSafe(|| check(&data)))
                .unwrap_or_else(|_| panic!("fuzz/corpus/{target}/{name}: the check panicked"));
            (name, out)
        })
        .collect()
}

/// The targets the fuzz crate declares, each with a corpus tested here.
#[test]
fn every_fuzz_target_has_a_corpus_run_here() {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    let declared: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|n| *n != "diag-fuzz")
        .collect();
    let tested = [
        "runfile_parse",
        "json_pointer",
        "contract_parsers",
        "chat_completion",
    ];
    assert_eq!(declared, tested, "a fuzz target without a corpus test here");
    for target in tested {
        corpus(target);
        let source = fuzz_dir().join(format!("fuzz_targets/{target}.rs"));
        let text = std::fs::read_to_string(&source).unwrap();
        assert!(
            text.contains(&format!("diag_fuzz::{target}(data)")),
            "{} does not call the shared check",
            source.display()
        );
    }
}

#[test]
fn the_run_file_corpus() {
    let out = run_corpus("runfile_parse", checks::runfile_parse);
    for (name, result) in &out {
        let result = result
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: not UTF-8"));
        match name.as_str() {
            "seed-pass.json" | "seed-planner-errors.json" => {
                let run = result.as_ref().unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(!run.exchanges.is_empty(), "{name}");
            }
            "seed-truncated.json" => {
                assert!(
                    matches!(result, Err(RunFileError::Malformed { .. })),
                    "{name}"
                )
            }
            "seed-unknown-format.json" => assert!(
                matches!(result, Err(RunFileError::UnknownFormat { .. })),
                "{name}"
            ),
            _ => {}
        }
    }
}

#[test]
fn the_json_pointer_corpus() {
    let out = run_corpus("json_pointer", checks::json_pointer);
    let resolved = out.values().filter(|r| matches!(r, Some(Ok(())))).count();
    let refused = out.values().filter(|r| matches!(r, Some(Err(_)))).count();
    assert!(resolved >= 1 && refused >= 1, "{out:?}");
}

#[test]
fn the_contract_parser_corpus() {
    let out = run_corpus("contract_parsers", checks::contract_parsers);
    let of = |name: &str| out[name].unwrap_or_else(|| panic!("{name}: not UTF-8"));
    type Which = fn(checks::Contracts) -> bool;
    // The target allows the Composer to cite `c1` only, and the answer seeds cite `c2` too:
    // they reach the check of cited claims, which refuses them.
    let contracts: [(&str, Which); 4] = [
        ("plan", |c: checks::Contracts| c.plan),
        ("evidence", |c: checks::Contracts| c.evidence),
        ("verdict", |c: checks::Contracts| c.verdict),
        ("answer", |c: checks::Contracts| !c.answer),
    ];
    for (name, want) in contracts {
        assert!(want(of(&format!("seed-{name}.json"))), "seed-{name}.json");
        assert!(
            want(of(&format!("seed-{name}-fenced.md"))),
            "seed-{name}-fenced.md"
        );
    }
    assert_eq!(of("seed-prose.txt"), checks::Contracts::default());
}

#[test]
fn the_chat_completion_corpus() {
    let out = run_corpus("chat_completion", checks::chat_completion);
    assert!(
        out["seed-error.json"].is_err(),
        "{:?}",
        out["seed-error.json"]
    );
    for name in ["seed-text.json", "seed-tool-calls.json"] {
        assert!(out[name].is_ok(), "{name}: {:?}", out[name]);
    }
}
