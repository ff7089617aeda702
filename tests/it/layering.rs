//! The workspace's layering, checked from the crates' manifests: which crate may depend on
//! which, and what the pure crates may use. A forbidden `use` does not compile because the
//! crate is not a dependency; this test keeps the dependency from being added instead.
//! (`scripts/test` also checks `diag-graph` and `diag-core` alone, where tokio's features are
//! only their own: in a whole-workspace build a feature another crate enables would hide a
//! forbidden `tokio::process` in core.)
//!
//! Tests are held to the layering too: a crate's tests may use, beside what the crate may,
//! any workspace crate that does not depend on it, and the test code of [`TEST_CODE`], which
//! nothing depends on but tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates that are test code: a `[dev-dependencies]` entry of the packages whose
/// integration tests use them, never a normal or build dependency, and named by no file under
/// any `src/` but their own (a crate's unit tests using one would link a second copy of the
/// crate). They may use what the tests use, rusqlite included.
pub const TEST_CODE: &[&str] = &["diag-testkit"];

/// One crate's rule: the workspace crates it may depend on and, for the pure crates, every
/// third-party crate and tokio feature it may use (`None`: an adapter, any it declares).
struct Layer {
    name: &'static str,
    workspace: &'static [&'static str],
    third_party: Option<&'static [&'static str]>,
    tokio_features: Option<&'static [&'static str]>,
}

const LAYERS: &[Layer] = &[
    Layer {
        name: "diag-graph",
        workspace: &[],
        third_party: Some(&[
            "serde",
            "thiserror",
            "time",
            "tokio",
            "tokio-util",
            "tracing",
        ]),
        tokio_features: Some(&["macros"]),
    },
    // The plain data a run records: below the contracts, the runtime and the store, so that a
    // change to a grounding rule or to the runtime rebuilds no store.
    Layer {
        name: "diag-records",
        workspace: &[],
        third_party: Some(&["serde", "serde_json", "sha2", "thiserror"]),
        tokio_features: Some(&[]),
    },
    Layer {
        name: "diag-alertmanager",
        workspace: &["diag-graph", "diag-records"],
        third_party: Some(&["form_urlencoded", "serde", "serde_json", "thiserror"]),
        tokio_features: Some(&[]),
    },
    // The run store's port and shared rules: records only, never the contracts' checks or the
    // agent runtime.
    Layer {
        name: "diag-store",
        workspace: &["diag-alertmanager", "diag-graph", "diag-records"],
        third_party: Some(&["serde", "serde_json", "thiserror", "tracing"]),
        tokio_features: Some(&[]),
    },
    Layer {
        name: "diag-protocol",
        workspace: &["diag-graph", "diag-records"],
        // No async runtime: the contracts and grounding are plain functions.
        third_party: Some(&[
            "pulldown-cmark",
            "rust_decimal",
            "serde",
            "serde_json",
            "thiserror",
            "unicode-normalization",
            "unicode-properties",
            "unicode-security",
        ]),
        tokio_features: Some(&[]),
    },
    Layer {
        name: "diag-core",
        workspace: &[
            "diag-alertmanager",
            "diag-graph",
            "diag-protocol",
            "diag-records",
            "diag-store",
        ],
        third_party: Some(&[
            "futures",
            // Default features off: validation only, no remote or file references.
            "jsonschema",
            "serde",
            "serde_json",
            "thiserror",
            "tokio",
            "tracing",
        ]),
        tokio_features: Some(&["time"]),
    },
    Layer {
        name: "diag-diagnosis",
        workspace: &["diag-core"],
        third_party: Some(&["serde", "serde_json", "thiserror"]),
        tokio_features: Some(&[]),
    },
    Layer {
        name: "diag-report",
        workspace: &["diag-core", "diag-diagnosis"],
        third_party: Some(&["pulldown-cmark", "serde", "serde_json", "thiserror"]),
        tokio_features: Some(&[]),
    },
    Layer {
        name: "diag-runfile",
        workspace: &["diag-core", "diag-diagnosis"],
        third_party: Some(&[
            "quick-xml",
            "regex",
            "serde",
            "serde_json",
            "serde_path_to_error",
            "thiserror",
        ]),
        tokio_features: Some(&[]),
    },
    Layer {
        name: "diag-ask",
        workspace: &[
            "diag-core",
            "diag-diagnosis",
            "diag-model-openai",
            "diag-runfile",
            "diag-tools",
        ],
        third_party: None,
        tokio_features: None,
    },
    Layer {
        name: "diag-eval",
        workspace: &["diag-ask", "diag-core", "diag-diagnosis", "diag-tools"],
        third_party: None,
        tokio_features: None,
    },
    Layer {
        name: "diag-alerts",
        workspace: &["diag-ask", "diag-core", "diag-diagnosis", "diag-report"],
        third_party: None,
        tokio_features: None,
    },
    Layer {
        name: "diag-mcp",
        workspace: &["diag-ask", "diag-core", "diag-diagnosis", "diag-report"],
        third_party: None,
        tokio_features: None,
    },
    Layer {
        name: "diag-bench",
        workspace: &[
            "diag",
            "diag-ask",
            "diag-core",
            "diag-diagnosis",
            "diag-report",
            "diag-store-sqlite",
            "diag-tools",
        ],
        third_party: None,
        tokio_features: None,
    },
    Layer {
        name: "diag-model-openai",
        workspace: &["diag-core"],
        third_party: None,
        tokio_features: None,
    },
    Layer {
        name: "diag-tools",
        workspace: &["diag-core"],
        third_party: None,
        tokio_features: None,
    },
    Layer {
        name: "diag-owner",
        workspace: &["diag-graph", "diag-records", "diag-store"],
        third_party: None,
        tokio_features: None,
    },
    Layer {
        name: "diag-store-sqlite",
        workspace: &[
            "diag-alertmanager",
            "diag-graph",
            "diag-owner",
            "diag-records",
            "diag-store",
        ],
        third_party: None,
        tokio_features: None,
    },
    Layer {
        name: "diag-store-postgres",
        workspace: &[
            "diag-alertmanager",
            "diag-graph",
            "diag-owner",
            "diag-records",
            "diag-store",
        ],
        third_party: None,
        tokio_features: None,
    },
    // Below the services, the reports and the command line, so that a change to one of those
    // rebuilds none of the test binaries that use the testkit: each crate added here is linked
    // into (and, when it changes, rebuilds) every one of them. Helpers that need a higher
    // crate live in that crate's `tests/it/support/`.
    Layer {
        name: "diag-testkit",
        workspace: &[
            "diag-core",
            "diag-diagnosis",
            "diag-store-postgres",
            "diag-store-sqlite",
        ],
        third_party: None,
        tokio_features: None,
    },
];

/// Third-party crates that one crate alone may use (as a normal dependency; a package's
/// integration tests may still open the store file as an operator would, so a
/// dev-dependency is allowed): SQL is spoken in the store adapter only.
const OWNED: &[(&str, &str)] = &[
    ("rusqlite", "diag-store-sqlite"),
    ("tokio-postgres", "diag-store-postgres"),
];

/// Every way the manifest of `krate` uses a crate another one owns, one line each (test code
/// is not shipped, and may).
fn owned_violations(krate: &str, deps: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    OWNED
        .iter()
        .filter(|_| !TEST_CODE.contains(&krate))
        .filter(|(dep, owner)| *owner != krate && deps.contains_key(*dep))
        .map(|(dep, owner)| format!("{krate} must not depend on {dep}: only {owner} may"))
        .collect()
}

/// A manifest's normal dependencies: name → the features it asks for.
fn dependencies(manifest: &str) -> BTreeMap<String, Vec<String>> {
    dependency_table(manifest, "dependencies")
}

/// A manifest's dependencies of one kind (`dependencies`, `dev-dependencies`,
/// `build-dependencies`), target-specific ones included: name → the features it asks for.
fn dependency_table(manifest: &str, kind: &str) -> BTreeMap<String, Vec<String>> {
    let doc: toml::Table = toml::from_str(manifest).expect("a manifest is TOML");
    let mut deps = BTreeMap::new();
    let mut tables = vec![doc.get(kind)];
    if let Some(targets) = doc.get("target").and_then(|t| t.as_table()) {
        tables.extend(targets.values().map(|t| t.get(kind)));
    }
    for table in tables.into_iter().flatten() {
        for (name, spec) in table.as_table().expect("dependencies is a table") {
            let features = spec
                .get("features")
                .and_then(|f| f.as_array())
                .map(|f| {
                    f.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            deps.insert(name.clone(), features);
        }
    }
    deps
}

/// Every way `deps` breaks `layer`, one line each.
fn violations(layer: &Layer, deps: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for (name, features) in deps {
        if name.starts_with("diag") {
            if !layer.workspace.contains(&name.as_str()) {
                out.push(format!("{} must not depend on {name}", layer.name));
            }
            continue;
        }
        if let Some(allowed) = layer.third_party {
            if !allowed.contains(&name.as_str()) {
                out.push(format!("{} must not depend on {name}", layer.name));
            }
        }
        if name == "tokio" {
            if let Some(allowed) = layer.tokio_features {
                for f in features {
                    if !allowed.contains(&f.as_str()) {
                        out.push(format!("{} must not use tokio's `{f}` feature", layer.name));
                    }
                }
            }
        }
    }
    out
}

/// The workspace packages (the root `diag` and each crate) and their manifests' text.
fn manifests(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert(
        "diag".to_string(),
        std::fs::read_to_string(root.join("Cargo.toml")).unwrap(),
    );
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        out.insert(
            name,
            std::fs::read_to_string(dir.join("Cargo.toml")).unwrap(),
        );
    }
    out
}

/// Every way the packages' manifests break the rules for tests, one line each: a test-code
/// crate as a normal or build dependency, or a dev-dependency on a workspace crate that
/// depends, directly or not, on the package whose tests would use it (the test-code crates
/// excepted: the tests link the package's normal library, the one they link too).
fn test_dependency_violations(manifests: &BTreeMap<String, String>) -> Vec<String> {
    let workspace = |deps: BTreeMap<String, Vec<String>>| -> BTreeSet<String> {
        deps.into_keys()
            .filter(|d| manifests.contains_key(d))
            .collect()
    };
    let normal: BTreeMap<&str, BTreeSet<String>> = manifests
        .iter()
        .map(|(name, m)| (name.as_str(), workspace(dependencies(m))))
        .collect();
    // Whether `from` depends on `to` through normal dependencies.
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(k) = todo.pop() {
            if k == to {
                return true;
            }
            if seen.insert(k.clone()) {
                todo.extend(normal.get(k.as_str()).into_iter().flatten().cloned());
            }
        }
        false
    };
    let mut out = Vec::new();
    for (name, manifest) in manifests {
        for kind in ["dependencies", "build-dependencies"] {
            for dep in dependency_table(manifest, kind).keys() {
                if TEST_CODE.contains(&dep.as_str()) {
                    out.push(format!(
                        "{name} must not have {dep} among its {kind}: only as a dev-dependency"
                    ));
                }
            }
        }
        for dep in workspace(dependency_table(manifest, "dev-dependencies")) {
            if !TEST_CODE.contains(&dep.as_str()) && reaches(&dep, name) {
                out.push(format!(
                    "{name}'s tests must not use {dep}, which depends on {name}"
                ));
            }
        }
    }
    out
}

/// The files under `src/` of the packages other than the test-code crates that name one of
/// them (`diag_testkit`), `file:line` each: a crate's unit tests are built with the crate, so
/// a test-code crate there would link a second copy of it.
fn test_code_in_sources(root: &Path) -> Vec<String> {
    let mut srcs = vec![root.join("src")];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if !TEST_CODE.contains(&name.as_str()) {
            srcs.push(dir.join("src"));
        }
    }
    let idents: Vec<String> = TEST_CODE.iter().map(|t| t.replace('-', "_")).collect();
    let mut found = Vec::new();
    while let Some(dir) = srcs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                srcs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, line) in text.lines().enumerate() {
                    if idents.iter().any(|id| line.contains(id.as_str())) {
                        let file = path.strip_prefix(root).unwrap_or(&path).display();
                        found.push(format!("{file}:{}: {}", i + 1, line.trim()));
                    }
                }
            }
        }
    }
    found.sort();
    found
}

#[test]
fn test_code_is_a_dev_dependency_only_and_tests_use_no_crate_above_their_own() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = test_dependency_violations(&manifests(root));
    found.extend(test_code_in_sources(root));
    assert!(
        found.is_empty(),
        "tests and their helpers break the layering:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_test_rules_refuse_test_code_as_a_dependency_and_a_test_above_its_crate() {
    let manifests: BTreeMap<String, String> = [
        (
            "diag-core",
            "[dependencies]\n[dev-dependencies]\ndiag-testkit = { workspace = true }\n",
        ),
        (
            "diag-tools",
            "[dependencies]\ndiag-core = { workspace = true }\n\
             [dev-dependencies]\ndiag-eval = { workspace = true }\n",
        ),
        (
            "diag-eval",
            "[dependencies]\ndiag-tools = { workspace = true }\n\
             [dev-dependencies]\ndiag-core = { workspace = true }\n",
        ),
        (
            "diag-testkit",
            "[dependencies]\ndiag-core = { workspace = true }\nrusqlite = \"0.40\"\n",
        ),
        (
            "diag",
            "[target.'cfg(unix)'.dependencies]\ndiag-testkit = { workspace = true }\n\
             [build-dependencies]\ndiag-testkit = { workspace = true }\n",
        ),
    ]
    .into_iter()
    .map(|(n, m)| (n.to_string(), m.to_string()))
    .collect();
    assert_eq!(
        test_dependency_violations(&manifests),
        [
            "diag must not have diag-testkit among its dependencies: only as a dev-dependency",
            "diag must not have diag-testkit among its build-dependencies: only as a \
             dev-dependency",
            "diag-tools's tests must not use diag-eval, which depends on diag-tools",
        ]
    );
    assert!(owned_violations("diag-testkit", &dependencies(&manifests["diag-testkit"])).is_empty());
}

#[test]
fn every_crate_depends_only_on_what_its_layer_allows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let layer = LAYERS
            .iter()
            .find(|l| l.name == name)
            .unwrap_or_else(|| panic!("crates/{name} has no rule in LAYERS: add its layer"));
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let deps = dependencies(&manifest);
        found.extend(violations(layer, &deps));
        found.extend(owned_violations(&name, &deps));
    }
    let root_deps = dependencies(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap());
    found.extend(owned_violations("diag", &root_deps));
    assert!(found.is_empty(), "layering broken:\n{}", found.join("\n"));
    // Features set in `[workspace.dependencies]` would reach every crate, the pure ones too.
    let workspace: toml::Table =
        toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
    let tokio = &workspace["workspace"]["dependencies"]["tokio"];
    assert!(
        tokio.get("features").is_none(),
        "tokio's features belong in each crate's manifest, not the workspace's: {tokio}"
    );
}

#[test]
fn every_layer_has_its_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for layer in LAYERS {
        assert!(
            root.join("crates")
                .join(layer.name)
                .join("Cargo.toml")
                .is_file(),
            "{} is in LAYERS but not under crates/",
            layer.name
        );
    }
}

#[test]
fn the_check_refuses_an_adapter_in_core_a_process_feature_and_an_owned_crate() {
    let core = LAYERS.iter().find(|l| l.name == "diag-core").unwrap();
    let manifest = r#"
        [dependencies]
        diag-graph = { workspace = true }
        diag-tools = { workspace = true }
        reqwest = { workspace = true }
        tokio = { workspace = true, features = ["time", "process"] }
        [target.'cfg(unix)'.dependencies]
        rusqlite = "0.40"
    "#;
    assert_eq!(
        violations(core, &dependencies(manifest)),
        [
            "diag-core must not depend on diag-tools",
            "diag-core must not depend on reqwest",
            "diag-core must not depend on rusqlite",
            "diag-core must not use tokio's `process` feature",
        ]
    );
    // An adapter may use any crate but one another crate owns; so may the root.
    let manifest = "[dependencies]\nrusqlite = \"0.40\"\nreqwest = \"1\"\n";
    assert_eq!(
        owned_violations("diag-tools", &dependencies(manifest)),
        ["diag-tools must not depend on rusqlite: only diag-store-sqlite may"]
    );
    assert_eq!(
        owned_violations("diag", &dependencies(manifest)),
        ["diag must not depend on rusqlite: only diag-store-sqlite may"]
    );
    assert!(owned_violations("diag-store-sqlite", &dependencies(manifest)).is_empty());
    let tools = LAYERS.iter().find(|l| l.name == "diag-tools").unwrap();
    let manifest = "[dependencies]\ndiag-store-sqlite = { path = \"x\" }\nreqwest = \"1\"\n";
    assert_eq!(
        violations(tools, &dependencies(manifest)),
        ["diag-tools must not depend on diag-store-sqlite"]
    );
}

/// No subcommand file imports another (`src/cli/ask.rs` using `super::report::…`): what two
/// commands share lives in a module both use (`live`, `documents`, `report_file`, `common`).
/// A subcommand file is one that defines a `cmd_` function.
#[test]
fn no_subcommand_imports_another() {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&cli)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
        .map(|e| {
            let name = e.path().file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(e.path()).unwrap())
        })
        .collect();
    files.sort();
    let subcommands: Vec<&str> = files
        .iter()
        .filter(|(name, text)| name != "mod" && text.contains("pub fn cmd_"))
        .map(|(name, _)| name.as_str())
        .collect();
    assert!(subcommands.len() >= 10, "{subcommands:?}");
    let mut found = Vec::new();
    for (name, text) in &files {
        if name == "mod" {
            continue;
        }
        for other in &subcommands {
            for (i, line) in text.lines().enumerate() {
                let uses = [
                    format!("super::{other}::"),
                    format!("super::{other};"),
                    format!("super::{other},"),
                    format!("super::{{{other}"),
                ];
                if other != name && uses.iter().any(|u| line.contains(u.as_str())) {
                    found.push(format!("src/cli/{name}.rs:{}: {}", i + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "subcommands importing another:\n{}",
        found.join("\n")
    );
}

/// A module's path in its crate from its file under `src/`: `model/structured.rs` →
/// `model::structured`, `model/mod.rs` → `model`, `lib.rs` → the root (empty).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn is_path_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The modules a statement names by path: `crate::a::b`, `super::x`, `self::x` and, for the
/// modules in `children`, `child::Item`; items of a group (`crate::a::{b, c}`) each. `at` is
/// the module the statement is in; the result is the longest prefix of each path that is a
/// module in `modules`.
fn named_modules(
    stmt: &str,
    at: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    let chars: Vec<(usize, char)> = stmt.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (at_byte, c) = chars[i];
        let starts_word = c.is_alphabetic() || c == '_';
        let after_boundary = i == 0 || {
            let p = chars[i - 1].1;
            !is_path_char(p) && p != ':' && p != '$'
        };
        if !(starts_word && after_boundary) {
            i += 1;
            continue;
        }
        // The whole path from here: idents joined by `::`, maybe ending in a group.
        let rest = &stmt[at_byte..];
        let mut segments: Vec<String> = Vec::new();
        let mut consumed = 0;
        let mut group: Option<&str> = None;
        loop {
            let seg: String = rest[consumed..]
                .chars()
                .take_while(|c| is_path_char(*c))
                .collect();
            if seg.is_empty() {
                if rest[consumed..].starts_with('{') {
                    group = Some(&rest[consumed + 1..]);
                }
                break;
            }
            consumed += seg.len();
            segments.push(seg);
            if rest[consumed..].starts_with("::") {
                consumed += 2;
            } else {
                break;
            }
        }
        let advance = rest[..consumed].chars().count().max(1);
        i += advance;
        if segments.len() < 2 && group.is_none() {
            continue;
        }
        // Where the path starts.
        let (mut base, tail): (Vec<String>, &[String]) = match segments[0].as_str() {
            "crate" => (Vec::new(), &segments[1..]),
            "self" => (at.to_vec(), &segments[1..]),
            "super" => {
                let mut base = at.to_vec();
                let mut k = 0;
                while segments.get(k).map(String::as_str) == Some("super") {
                    base.pop();
                    k += 1;
                }
                (base, &segments[k..])
            }
            first => {
                let mut child = at.to_vec();
                child.push(first.to_string());
                if !modules.contains(&child) {
                    continue;
                }
                (at.to_vec(), &segments[..])
            }
        };
        let mut paths: Vec<Vec<String>> = Vec::new();
        base.extend(tail.iter().cloned());
        paths.push(base.clone());
        if let Some(group) = group {
            let mut depth = 0;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            items.push(item);
            for item in items {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| is_path_char(*c))
                    .collect();
                if !name.is_empty() && name != "self" {
                    let mut p = base.clone();
                    p.push(name);
                    paths.push(p);
                }
            }
        }
        for mut path in paths {
            while !path.is_empty() && !modules.contains(&path) {
                path.pop();
            }
            out.insert(path);
        }
    }
    out
}

/// The import graph of one crate's modules (outside tests): module → the modules it names,
/// leaving out its own ancestors (a module using what its parent declares is how Rust nests
/// modules, not a circle).
fn module_graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files: Vec<(PathBuf, Vec<(usize, String)>)> = crate::invariants::non_test_code(src)
        .into_iter()
        .filter(|(f, _)| !f.strip_prefix(src).is_ok_and(|r| r.starts_with("bin")))
        .collect();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(f, _)| module_of(src, f)).collect();
    let mut graph = BTreeMap::new();
    for (file, code) in &files {
        let at = module_of(src, file);
        // Statements: a `use` that spans lines is read whole.
        let mut stmts: Vec<String> = Vec::new();
        let mut pending: Option<String> = None;
        for (_, line) in code {
            let t = line.trim();
            if let Some(stmt) = pending.as_mut() {
                stmt.push_str(t);
                if t.ends_with(';') {
                    stmts.extend(pending.take());
                }
                continue;
            }
            if t.contains("use ") && !t.ends_with(';') {
                pending = Some(t.to_string());
            } else {
                stmts.push(t.to_string());
            }
        }
        let edges: &mut BTreeSet<Vec<String>> = graph.entry(at.clone()).or_default();
        for stmt in &stmts {
            for target in named_modules(stmt, &at, &modules) {
                if target != at && !at.starts_with(&target) {
                    edges.insert(target);
                }
            }
        }
    }
    graph
}

/// The circles of `graph`: each strongly connected set of two or more modules, as
/// `a → b → a` text.
fn circles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<String> {
    let reach = |from: &Vec<String>| -> BTreeSet<Vec<String>> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let name = |m: &Vec<String>| {
        if m.is_empty() {
            "crate".to_string()
        } else {
            m.join("::")
        }
    };
    let mut out = Vec::new();
    let mut reported: BTreeSet<Vec<String>> = BTreeSet::new();
    for m in graph.keys() {
        if reported.contains(m) {
            continue;
        }
        let from_m = reach(m);
        if !from_m.contains(m) {
            continue;
        }
        let set: Vec<Vec<String>> = from_m
            .iter()
            .filter(|n| reach(n).contains(m))
            .cloned()
            .collect();
        reported.extend(set.iter().cloned());
        out.push(set.iter().map(name).collect::<Vec<_>>().join(" ↔ "));
    }
    out
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let mut found = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut srcs = vec![("diag".to_string(), root.join("src"))];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        srcs.push((name, dir.join("src")));
    }
    for (krate, src) in srcs {
        for circle in circles(&module_graph(&src)) {
            found.push(format!("{krate}: {circle}"));
        }
    }
    assert!(
        found.is_empty(),
        "import circles between modules:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_circle_check_reads_paths_groups_and_children() {
    let modules: BTreeSet<Vec<String>> = [
        vec![],
        vec!["model".to_string()],
        vec!["model".to_string(), "endpoint".to_string()],
        vec!["model".to_string(), "structured".to_string()],
        vec!["limits".to_string()],
    ]
    .into_iter()
    .collect();
    let at = vec!["model".to_string(), "structured".to_string()];
    let named = named_modules(
        "use super::endpoint::{Endpoint, LearnedSink}; let x = crate::limits::Limits::DEFAULT; diag_core::limits::X;",
        &at,
        &modules,
    );
    assert!(named.contains(&vec!["model".to_string(), "endpoint".to_string()]));
    assert!(named.contains(&vec!["limits".to_string()]));
    let at = vec!["model".to_string()];
    let named = named_modules(
        "pub use structured::{EndpointMemory, Learned};",
        &at,
        &modules,
    );
    assert!(named.contains(&vec!["model".to_string(), "structured".to_string()]));
    let graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = [
        (
            vec!["a".to_string()],
            [vec!["b".to_string()]].into_iter().collect(),
        ),
        (
            vec!["b".to_string()],
            [vec!["a".to_string()]].into_iter().collect(),
        ),
        (
            vec!["c".to_string()],
            [vec!["a".to_string()]].into_iter().collect(),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(circles(&graph), ["a ↔ b"]);
}
