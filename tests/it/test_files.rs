//! No test file is forgotten, in any crate: every `.rs` file under the root's `tests/` and
//! each `crates/<crate>/tests/` is a module some `mod` declaration reaches from a test binary's
//! root (a file nothing reaches is never compiled, so its tests never run and nothing says
//! so), and each of those folders holds at most one test binary, `tests/it/main.rs`: any other
//! (a top-level `tests/*.rs`, another `tests/<dir>/main.rs`, a `[[test]]` target) would relink
//! the whole stack, unless [`SEPARATE_BINARIES`] names it with its reason. The logic is plain
//! functions over a listing, tested below on made-up listings, so the check is known to fail
//! when it should.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// Test binaries allowed beside a crate's `tests/it/main.rs`, with the reason (a path relative
/// to the repository: `tests/<file>` or `crates/<name>/tests/<file>`). Empty: every
/// integration test of the workspace is a module of its crate's `tests/it/main.rs`.
const SEPARATE_BINARIES: &[(&str, &str)] = &[];

/// The files of `listing` (paths relative to a crate's `tests/`, with `/`, mapped to their
/// source text) that no `mod` declaration reaches from any of `binaries`, sorted.
///
/// `mod name;` in `main.rs` or a `mod.rs` names `name.rs` or `name/mod.rs` beside it; in any
/// other `foo.rs` it names `foo/name.rs` or `foo/name/mod.rs`; a `#[path = "..."]` attribute on
/// the line before names its file relative to the declaring file's folder. Declarations in
/// comments do not count.
pub fn unreached(listing: &BTreeMap<String, String>, binaries: &[String]) -> Vec<String> {
    let mut reached = BTreeSet::new();
    let mut pending = binaries.to_vec();
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

/// The test binaries Cargo finds in `listing` (paths relative to a crate's `tests/`): each
/// `.rs` file directly in it and each `<dir>/main.rs`, sorted.
pub fn binaries(listing: &BTreeMap<String, String>) -> Vec<String> {
    listing
        .keys()
        .filter(|f| match f.split_once('/') {
            None => true,
            Some((_, rest)) => rest == "main.rs",
        })
        .cloned()
        .collect()
}

/// The test binaries that `allowed` does not name, sorted.
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

/// The manifest and the `tests/` folder of every package: the root's and each under
/// `crates/`, with the prefix (`""`, `crates/<name>/`) their paths are shown with.
fn packages(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = vec![(root.to_path_buf(), String::new())];
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        let krate = krate.unwrap().path();
        let name = krate.file_name().unwrap().to_string_lossy().into_owned();
        out.push((krate, format!("crates/{name}/")));
    }
    out.sort();
    out
}

#[test]
fn every_test_file_is_compiled() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut orphans = Vec::new();
    let mut extra_binaries = Vec::new();
    let mut test_targets = Vec::new();
    let mut binaries_found = Vec::new();
    for (dir, prefix) in packages(&root) {
        let manifest: toml::Table =
            toml::from_str(&std::fs::read_to_string(dir.join("Cargo.toml")).unwrap()).unwrap();
        if manifest.contains_key("test") {
            test_targets.push(format!("{prefix}Cargo.toml"));
        }
        let tests = dir.join("tests");
        if !tests.is_dir() {
            continue;
        }
        let mut listing = BTreeMap::new();
        rs_files(&tests, &tests, &mut listing);
        let bins = binaries(&listing);
        let shown = |f: &String| format!("{prefix}tests/{f}");
        orphans.extend(unreached(&listing, &bins).iter().map(shown));
        extra_binaries.extend(bins.iter().filter(|b| *b != "it/main.rs").map(shown));
        binaries_found.extend(bins.iter().map(shown));
    }
    assert!(
        binaries_found.iter().any(|b| b == "tests/it/main.rs")
            && root.join("tests/it/test_files.rs").is_file(),
        "the test binaries found are not what this test expects: {binaries_found:?}"
    );
    assert!(
        orphans.is_empty(),
        "test files that no `mod` declaration reaches, so they are never compiled or run: \
         {orphans:?} (declare each in its binary's main.rs or in its parent module)"
    );
    let extra = unexpected_binaries(&extra_binaries, SEPARATE_BINARIES);
    assert!(
        extra.is_empty(),
        "test binaries beside a crate's tests/it/main.rs, each relinking the stack: {extra:?}; \
         make each a module of its crate's tests/it/main.rs, or name it in SEPARATE_BINARIES \
         (tests/it/test_files.rs) with the reason it must run in a process of its own"
    );
    assert!(
        test_targets.is_empty(),
        "manifests that declare `[[test]]` targets: {test_targets:?}; a crate's integration \
         tests are the modules of its tests/it/main.rs, which Cargo finds by itself"
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
        unreached(&files, &["main.rs".to_string()]),
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
    assert_eq!(
        unreached(&files, &["main.rs".to_string()]),
        ["support/deep/mod.rs"]
    );
}

#[test]
fn a_tests_folder_has_a_binary_per_top_level_file_and_per_folder_main() {
    let files = listing(&[
        ("it/main.rs", "mod cli;\n"),
        ("it/cli.rs", ""),
        ("extra.rs", ""),
        ("other/main.rs", "mod x;\n"),
        ("other/x.rs", ""),
        ("common/mod.rs", ""),
        ("it/nested/main.rs", ""),
    ]);
    let bins = binaries(&files);
    assert_eq!(bins, ["extra.rs", "it/main.rs", "other/main.rs"]);
    assert_eq!(
        unreached(&files, &bins),
        ["common/mod.rs", "it/nested/main.rs"]
    );
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
