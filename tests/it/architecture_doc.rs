//! ARCHITECTURE.md is checked against the code it describes, so it cannot drift unseen:
//!
//! - it is at most 300 lines;
//! - its crate edges (the block under "## Crates") are exactly the workspace crates' normal
//!   dependencies on each other, every workspace package listed once;
//! - every file or folder its code map names (and the longer `docs/design/code-map.md`) exists:
//!   a path with a `/` under the section's crate, its `src/`, or the repository root; a bare
//!   file name somewhere in the repository;
//! - every check an Architecture Invariant names as `module::test` is a test function in a
//!   `module.rs` of some package's tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const MAX_LINES: usize = 300;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Every file and folder of the repository, relative to its root with `/` separators, outside
/// build output, version control and installed peers.
fn repository_paths() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if matches!(
                name.as_str(),
                "target" | ".git" | "node_modules" | ".peers" | "fuzz_target"
            ) {
                continue;
            }
            let path = entry.path();
            let shown = path
                .strip_prefix(root())
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            out.push(if is_dir { format!("{shown}/") } else { shown });
            if is_dir {
                walk(&path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root(), &mut out);
    out
}

/// The workspace packages: name → manifest directory relative to the root.
fn packages() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![String::new()];
    let crates = std::fs::read_dir(root().join("crates")).expect("crates/");
    for entry in crates.flatten() {
        if entry.path().join("Cargo.toml").is_file() {
            dirs.push(format!("crates/{}", entry.file_name().to_string_lossy()));
        }
    }
    for dir in dirs {
        let manifest = if dir.is_empty() {
            read("Cargo.toml")
        } else {
            read(&format!("{dir}/Cargo.toml"))
        };
        let doc: toml::Table = toml::from_str(&manifest).expect("a manifest is TOML");
        let name = doc["package"]["name"].as_str().expect("a package name");
        out.insert(name.to_string(), dir);
    }
    out
}

/// A package's normal dependencies on workspace packages.
fn workspace_dependencies(dir: &str, workspace: &BTreeMap<String, String>) -> BTreeSet<String> {
    let path = if dir.is_empty() {
        "Cargo.toml".to_string()
    } else {
        format!("{dir}/Cargo.toml")
    };
    let doc: toml::Table = toml::from_str(&read(&path)).expect("a manifest is TOML");
    let mut tables = vec![doc.get("dependencies")];
    if let Some(targets) = doc.get("target").and_then(|t| t.as_table()) {
        tables.extend(targets.values().map(|t| t.get("dependencies")));
    }
    tables
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_table())
        .flat_map(|t| t.keys().cloned())
        .filter(|name| workspace.contains_key(name))
        .collect()
}

/// The crate edges the document states: crate → the crates it says it depends on. A line
/// `name (note) ─▶ a, b, c (note)` starts a crate; a line without the arrow continues the one
/// before; `(none)` is no edge.
fn documented_edges(doc: &str) -> Vec<(String, BTreeSet<String>)> {
    let section = doc
        .split("\n## Crates\n")
        .nth(1)
        .expect("a `## Crates` section");
    let block = section
        .split("```")
        .nth(1)
        .expect("the crate edges in a fenced block");
    let mut out: Vec<(String, BTreeSet<String>)> = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let (name, targets) = match line.split_once('─') {
            Some((left, right)) => {
                let name = left.split_whitespace().next().unwrap_or_default();
                let targets = right.trim_start_matches(['─', '▶', ' ']);
                out.push((name.to_string(), BTreeSet::new()));
                (name.to_string(), targets)
            }
            None => (
                out.last().map(|(n, _)| n.clone()).unwrap_or_default(),
                line.trim(),
            ),
        };
        // A trailing note in parentheses says something about the crate, not an edge.
        let targets = match targets.find(" (") {
            Some(i) => &targets[..i],
            None => targets,
        };
        let entry = out
            .iter_mut()
            .find(|(n, _)| *n == name)
            .expect("a continuation follows a crate");
        for target in targets.split(',').map(str::trim) {
            if !target.is_empty() && target != "(none)" {
                entry.1.insert(target.to_string());
            }
        }
    }
    out
}

#[test]
fn architecture_md_is_at_most_300_lines() {
    let lines = read("ARCHITECTURE.md").lines().count();
    assert!(
        lines <= MAX_LINES,
        "ARCHITECTURE.md has {lines} lines; at most {MAX_LINES} (the longer descriptions go to docs/design/)"
    );
}

#[test]
fn its_crate_edges_are_the_manifests() {
    let workspace = packages();
    let documented = documented_edges(&read("ARCHITECTURE.md"));
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (name, edges) in &documented {
        if !seen.insert(name.clone()) {
            problems.push(format!("{name} is listed twice"));
        }
        let Some(dir) = workspace.get(name) else {
            problems.push(format!("{name} is not a workspace package"));
            continue;
        };
        let actual = workspace_dependencies(dir, &workspace);
        for missing in actual.difference(edges) {
            problems.push(format!(
                "{name} depends on {missing}, which the document leaves out"
            ));
        }
        for extra in edges.difference(&actual) {
            problems.push(format!(
                "{name} does not depend on {extra}, as the document says"
            ));
        }
    }
    for name in workspace.keys().filter(|n| !seen.contains(*n)) {
        problems.push(format!("{name} is not listed"));
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md, ## Crates:\n{}",
        problems.join("\n")
    );
}

/// The backticked words of a line that name a file or folder of the repository: with a `/` or
/// a file extension, without spaces, `::`, wildcards, URLs or absolute paths.
fn named_paths(line: &str) -> Vec<String> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| !t.is_empty())
        .filter(|t| {
            !t.contains([' ', '*', '{', '<', '@', '='])
                && !t.contains("::")
                && !t.contains("://")
                && !t.starts_with(['/', '-', '.'])
        })
        .filter(|t| {
            let ext = [
                ".rs", ".md", ".toml", ".json", ".sh", ".yml", ".yaml", ".om",
            ];
            t.contains('/') || ext.iter().any(|e| t.ends_with(e))
        })
        .map(str::to_string)
        .collect()
}

/// The crate directory a heading names (`### \`crates/diag-core\`: …`, `## diag-core …`, the root
/// package), if any.
fn heading_crate(heading: &str, workspace: &BTreeMap<String, String>) -> Option<String> {
    if heading.contains("root package") || heading.contains("command line") {
        return Some(String::new());
    }
    heading
        .split(|c: char| !(c.is_alphanumeric() || c == '-'))
        .find_map(|word| workspace.get(word).filter(|d| !d.is_empty()).cloned())
}

fn missing_paths(
    doc_path: &str,
    doc: &str,
    paths: &[String],
    workspace: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut crate_dir: Option<String> = None;
    let mut missing = Vec::new();
    for (n, line) in doc.lines().enumerate() {
        if line.starts_with('#') {
            crate_dir = heading_crate(line, workspace);
        }
        for name in named_paths(line) {
            let trimmed = name.trim_end_matches('/');
            let found = if trimmed.contains('/') {
                let mut candidates = vec![trimmed.to_string()];
                if let Some(dir) = crate_dir.as_deref().filter(|d| !d.is_empty()) {
                    candidates.push(format!("{dir}/{trimmed}"));
                    candidates.push(format!("{dir}/src/{trimmed}"));
                }
                candidates.push(format!("src/{trimmed}"));
                candidates
                    .iter()
                    .any(|c| paths.iter().any(|p| p.trim_end_matches('/') == c))
                    // A folder named from inside its crate (`store/`, `serve/`).
                    || paths
                        .iter()
                        .any(|p| p.trim_end_matches('/').ends_with(&format!("/{trimmed}")))
            } else {
                paths.iter().any(|p| {
                    let p = p.trim_end_matches('/');
                    p == trimmed || p.ends_with(&format!("/{trimmed}"))
                })
            };
            if !found {
                missing.push(format!("{doc_path}:{}: `{name}`", n + 1));
            }
        }
    }
    missing
}

#[test]
fn every_file_the_code_map_names_exists() {
    let workspace = packages();
    let paths = repository_paths();
    let mut missing = Vec::new();
    for doc in ["ARCHITECTURE.md", "docs/design/code-map.md"] {
        missing.extend(missing_paths(doc, &read(doc), &paths, &workspace));
    }
    assert!(
        missing.is_empty(),
        "named but not in the repository:\n{}",
        missing.join("\n")
    );
}

/// The tests of every package: each `tests/**/*.rs` file's module name → its texts.
fn test_sources() -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for path in repository_paths() {
        let in_tests = path.starts_with("tests/") || path.contains("/tests/");
        if !in_tests || !path.ends_with(".rs") {
            continue;
        }
        let module = Path::new(&path)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.entry(module).or_default().push(read(&path));
    }
    out
}

/// The `module::test` names an invariant line gives as its checks.
fn named_checks(line: &str) -> Vec<(String, String)> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|t| {
            let (module, test) = t.split_once("::")?;
            let plain = |s: &str| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            };
            (plain(module) && plain(test)).then(|| (module.to_string(), test.to_string()))
        })
        .collect()
}

#[test]
fn every_check_an_invariant_names_exists() {
    let sources = test_sources();
    let doc = read("ARCHITECTURE.md");
    let mut invariants = 0;
    let mut missing = Vec::new();
    for (n, line) in doc.lines().enumerate() {
        if !line.contains("**Architecture Invariant:**") {
            continue;
        }
        invariants += 1;
        for (module, test) in named_checks(line) {
            let found = sources.get(&module).is_some_and(|texts| {
                texts.iter().any(|t| {
                    t.contains(&format!("fn {test}(")) || t.contains(&format!("fn {test} ("))
                })
            });
            if !found {
                missing.push(format!("ARCHITECTURE.md:{}: `{module}::{test}`", n + 1));
            }
        }
    }
    assert!(
        invariants >= 10,
        "the invariants were not found ({invariants})"
    );
    assert!(
        missing.is_empty(),
        "named checks that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_checks_find_what_they_should() {
    let workspace: BTreeMap<String, String> = [("diag-core", "crates/diag-core"), ("diag", "")]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let edges = documented_edges(
        "x\n## Crates\n\n```\ndiag (the CLI) ─▶ diag-core,\n                   diag-graph\ndiag-core ─▶ (none)\n```\n",
    );
    assert_eq!(edges[0].0, "diag");
    assert_eq!(
        edges[0].1,
        BTreeSet::from(["diag-core".to_string(), "diag-graph".to_string()])
    );
    assert!(edges[1].1.is_empty());
    assert_eq!(
        named_paths("the `protocol/` folder, `parse.rs`, `diag_core::store`, `GET /v1/models`, `https://x/y`"),
        ["protocol/", "parse.rs"]
    );
    assert_eq!(
        heading_crate("### `crates/diag-core`: contracts", &workspace).as_deref(),
        Some("crates/diag-core")
    );
    assert_eq!(
        named_checks("(`layering::every_crate`; clippy in `scripts/test`; `a::B`)"),
        [("layering".to_string(), "every_crate".to_string())]
    );
    let paths: Vec<String> = [
        "crates/diag-core/",
        "crates/diag-core/src/",
        "crates/diag-core/src/protocol/",
        "crates/diag-core/src/protocol/parse.rs",
        "tests/it/report_browser.rs",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let doc = "### `crates/diag-core`: core\n- `protocol/`: `parse.rs`, `protocol/parse.rs`, `tests/it/report_browser.rs`\n- `gone.rs`, `protocol/gone.rs`\n";
    assert_eq!(
        missing_paths("A.md", doc, &paths, &workspace),
        ["A.md:3: `gone.rs`", "A.md:3: `protocol/gone.rs`"]
    );
}
