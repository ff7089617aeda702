//! The workspace's layering, checked from the crates' manifests: which crate may depend on
//! which, and what the pure crates may use. A forbidden `use` does not compile because the
//! crate is not a dependency; this test keeps the dependency from being added instead.
//! (`scripts/test` also checks `diag-graph` and `diag-core` alone, where tokio's features are
//! only their own: in a whole-workspace build a feature another crate enables would hide a
//! forbidden `tokio::process` in core.)

use std::collections::BTreeMap;
use std::path::Path;

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
    Layer {
        name: "diag-core",
        workspace: &["diag-graph"],
        third_party: Some(&[
            "futures",
            "pulldown-cmark",
            "serde",
            "serde_json",
            "sha2",
            "thiserror",
            "time",
            "tokio",
            "tokio-util",
            "tracing",
            "unicode-normalization",
            "unicode-properties",
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
        workspace: &["diag-core"],
        third_party: None,
        tokio_features: None,
    },
    Layer {
        name: "diag-store-sqlite",
        workspace: &["diag-core", "diag-owner"],
        third_party: None,
        tokio_features: None,
    },
    Layer {
        name: "diag-store-postgres",
        workspace: &["diag-core", "diag-owner"],
        third_party: None,
        tokio_features: None,
    },
];

/// Third-party crates that one crate alone may use (as a normal dependency; the root's
/// integration tests may still open the store file as an operator would, so a
/// dev-dependency is allowed): SQL is spoken in the store adapter only.
const OWNED: &[(&str, &str)] = &[
    ("rusqlite", "diag-store-sqlite"),
    ("tokio-postgres", "diag-store-postgres"),
];

/// Every way the manifest of `krate` uses a crate another one owns, one line each.
fn owned_violations(krate: &str, deps: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    OWNED
        .iter()
        .filter(|(dep, owner)| *owner != krate && deps.contains_key(*dep))
        .map(|(dep, owner)| format!("{krate} must not depend on {dep}: only {owner} may"))
        .collect()
}

/// A manifest's normal dependencies: name → the features it asks for.
fn dependencies(manifest: &str) -> BTreeMap<String, Vec<String>> {
    let doc: toml::Table = toml::from_str(manifest).expect("a manifest is TOML");
    let mut deps = BTreeMap::new();
    let mut tables = vec![doc.get("dependencies")];
    if let Some(targets) = doc.get("target").and_then(|t| t.as_table()) {
        tables.extend(targets.values().map(|t| t.get("dependencies")));
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
