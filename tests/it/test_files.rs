//! No test file is forgotten: every `.rs` file under `tests/it/` is a module some `mod`
//! declaration reaches from `main.rs` (a file nothing reaches is never compiled, so its tests
//! never run and nothing says so), and no new top-level `tests/*.rs` appears (each one would be
//! a test binary of its own, relinking the whole stack) unless [`SEPARATE_BINARIES`] names it
//! with its reason. The logic is two plain functions over a listing, tested below on made-up
//! listings, so the check is known to fail when it should.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// Top-level test files allowed to be binaries of their own, with the reason (a file name
/// relative to the crate's `tests/`, or `crates/<name>/tests/<file>`). Empty: every test of
/// the workspace that is not a unit test is a module of `tests/it/main.rs`.
const SEPARATE_BINARIES: &[(&str, &str)] = &[];

/// The files of `listing` (paths relative to the test binary's folder, with `/`, mapped to
/// their source text) that no `mod` declaration reaches from `main.rs`, sorted.
///
/// `mod name;` in `main.rs` or a `mod.rs` names `name.rs` or `name/mod.rs` beside it; in any
/// other `foo.rs` it names `foo/name.rs` or `foo/name/mod.rs`; a `#[path = "..."]` attribute on
/// the line before names its file relative to the declaring file's folder. Declarations in
/// comments do not count.
pub fn unreached(listing: &BTreeMap<String, String>) -> Vec<String> {
    let mut reached = BTreeSet::new();
    let mut pending = vec!["main.rs".to_string()];
    while let Some(file) = pending.pop() {
        let Some(source) = listing.get(&file) else {
            continue;
        };
        if !reached.insert(file.clone()) {
            continue;
        }
        let path = Path::new(&file);
        let dir = path.parent().unwrap_or(Path::new(""));
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let children_dir = if matches!(stem, "main" | "mod" | "lib") {
            dir.to_path_buf()
        } else {
            dir.join(stem)
        };
        for decl in mod_decls(source) {
            let candidates = match decl.path {
                Some(p) => vec![normalize(&dir.join(p))],
                None => vec![
                    normalize(&children_dir.join(format!("{}.rs", decl.name))),
                    normalize(&children_dir.join(&decl.name).join("mod.rs")),
                ],
            };
            pending.extend(candidates.into_iter().filter(|c| listing.contains_key(c)));
        }
    }
    listing
        .keys()
        .filter(|f| !reached.contains(*f))
        .cloned()
        .collect()
}

/// The top-level test files (each a separate binary) that `allowed` does not name, sorted.
pub fn unexpected_binaries(top_level: &[String], allowed: &[(&str, &str)]) -> Vec<String> {
    let mut out: Vec<String> = top_level
        .iter()
        .filter(|f| !allowed.iter().any(|(name, _)| name == f))
        .cloned()
        .collect();
    out.sort();
    out
}

struct ModDecl {
    name: String,
    path: Option<String>,
}

/// The out-of-line `mod` declarations of `source`, with the `#[path]` of the line before.
fn mod_decls(source: &str) -> Vec<ModDecl> {
    let mut out = Vec::new();
    let mut path_attr: Option<String> = None;
    for line in source.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("#[path = \"") {
            path_attr = rest.strip_suffix("\"]").map(str::to_string);
            continue;
        }
        let decl = line
            .strip_prefix("pub(crate) mod ")
            .or_else(|| line.strip_prefix("pub mod "))
            .or_else(|| line.strip_prefix("mod "))
            .and_then(|rest| rest.strip_suffix(';'));
        if let Some(name) = decl {
            out.push(ModDecl {
                name: name.trim().to_string(),
                path: path_attr.take(),
            });
        } else if !line.starts_with("#[") {
            path_attr = None;
        }
    }
    out
}

/// `a/b/../c.rs` → `a/c.rs`, with `/` separators (a path that leaves the folder keeps its
/// leading `..`, and so matches no listed file).
fn normalize(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if parts.last().is_some_and(|p| p != "..") {
                    parts.pop();
                } else {
                    parts.push("..".into());
                }
            }
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    parts.join("/")
}

fn rs_files(dir: &Path, base: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rs_files(&path, base, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(base).unwrap();
            out.insert(normalize(rel), std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// The `.rs` files directly in `dir`, as `prefix` + file name.
fn top_level_rs(dir: &Path, prefix: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs"))
        .map(|p| format!("{prefix}{}", p.file_name().unwrap().to_string_lossy()))
        .collect()
}

#[test]
fn every_test_file_is_compiled() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let it = root.join("tests/it");
    let mut listing = BTreeMap::new();
    rs_files(&it, &it, &mut listing);
    assert!(
        listing.contains_key("main.rs") && listing.contains_key("test_files.rs"),
        "the listing of {} is not what this test expects: {:?}",
        it.display(),
        listing.keys().collect::<Vec<_>>()
    );
    let orphans = unreached(&listing);
    assert!(
        orphans.is_empty(),
        "files under tests/it/ that no `mod` declaration reaches, so they are never compiled \
         or run: {orphans:?} (declare each in main.rs or in its parent module)"
    );

    let mut top_level = top_level_rs(&root.join("tests"), "");
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        let krate = krate.unwrap().path();
        let name = krate.file_name().unwrap().to_string_lossy().into_owned();
        top_level.extend(top_level_rs(
            &krate.join("tests"),
            &format!("crates/{name}/tests/"),
        ));
    }
    let extra = unexpected_binaries(&top_level, SEPARATE_BINARIES);
    assert!(
        extra.is_empty(),
        "top-level test files, each a test binary of its own: {extra:?}; make each a module of \
         tests/it/main.rs, or name it in SEPARATE_BINARIES (tests/it/test_files.rs) with the \
         reason it must run in a process of its own"
    );
}

fn listing(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(f, s)| (f.to_string(), s.to_string()))
        .collect()
}

#[test]
fn a_file_no_mod_reaches_is_named() {
    let files = listing(&[
        ("main.rs", "mod support;\nmod cli;\n// mod old;\n"),
        ("support/mod.rs", "pub mod peers;\n"),
        ("support/peers.rs", ""),
        ("cli.rs", "fn x() {}\n"),
        ("old.rs", "#[test] fn t() {}\n"),
        ("support/stale.rs", ""),
        ("workflow/nested.rs", ""),
    ]);
    assert_eq!(
        unreached(&files),
        ["old.rs", "support/stale.rs", "workflow/nested.rs"]
    );
}

#[test]
fn children_of_a_plain_file_and_path_attributes_are_reached() {
    let files = listing(&[
        ("main.rs", "mod cli;\nmod support;\n"),
        ("cli.rs", "mod helpers;\n"),
        ("cli/helpers.rs", ""),
        (
            "support/mod.rs",
            "#[path = \"../shared/x.rs\"]\npub(crate) mod x;\n\
             #[path = \"../../../fuzz/src/lib.rs\"]\n#[allow(dead_code)]\nmod checks;\n",
        ),
        ("shared/x.rs", ""),
        ("support/deep/mod.rs", ""),
    ]);
    assert_eq!(unreached(&files), ["support/deep/mod.rs"]);
}

#[test]
fn a_new_top_level_test_file_fails_unless_allowed_with_a_reason() {
    let top = vec!["zeta.rs".to_string(), "alpha.rs".to_string()];
    assert_eq!(unexpected_binaries(&top, &[]), ["alpha.rs", "zeta.rs"]);
    assert_eq!(
        unexpected_binaries(&top, &[("zeta.rs", "installs a panic hook")]),
        ["alpha.rs"]
    );
    assert!(unexpected_binaries(&[], &[]).is_empty());
}
