//! Every default the documentation states is the code's one constant: the alert look-back
//! (`diag_core::alert::DEFAULT_LOOKBACK`: `--lookback`, `[serve] lookback_secs`) and the
//! `[serve]` defaults (diag-alerts' `config`). For each default, the statements of it in
//! README.md, the openspec specs, the JSON Schemas under `docs/schema/` and the `--help` of
//! the command that takes it are found by pattern; there must be at least one, and each must
//! say the constant's value (openspec/specs/command-line/spec.md, "Defaults").

use std::path::PathBuf;

use diag_alerts::config as serve;
use diag_core::alert::DEFAULT_LOOKBACK;
use regex::Regex;

use crate::support::cli_env::{repo_file, TestEnv};

/// One default: its name, its value as the documents write it, and the patterns whose first
/// group captures a statement of it (each turned into the written form by `read`).
struct Default {
    name: &'static str,
    value: String,
    patterns: &'static [&'static str],
    read: fn(&str) -> String,
}

fn same(s: &str) -> String {
    s.to_string()
}

fn minutes_as_secs(s: &str) -> String {
    (s.parse::<u64>().unwrap() * 60).to_string()
}

fn mib_as_bytes(s: &str) -> String {
    (s.parse::<u64>().unwrap() * 1024 * 1024).to_string()
}

/// A number in the documents, with its thousands separators dropped.
fn number(s: &str) -> String {
    s.replace(',', "")
}

fn defaults() -> Vec<Default> {
    let lookback = DEFAULT_LOOKBACK.as_secs().to_string();
    vec![
        Default {
            name: "the alert look-back, in minutes",
            value: lookback.clone(),
            patterns: &[
                r"--lookback`?,\s+default\s+(\d+)\s+minutes",
                r"look-back \(default (\d+) min\)",
            ],
            read: minutes_as_secs,
        },
        Default {
            name: "--lookback's default",
            value: lookback.clone(),
            patterns: &[r"\[default: (\d+)m\]"],
            read: minutes_as_secs,
        },
        Default {
            name: "[serve] lookback_secs",
            value: serve::DEFAULT_LOOKBACK_SECS.to_string(),
            patterns: &[r"lookback_secs`?\s*(?:\(|,\s*)(?:default\s+)?(\d[\d,]*)"],
            read: number,
        },
        Default {
            name: "[serve] listen",
            value: serve::DEFAULT_LISTEN.to_string(),
            patterns: &[
                r"`?listen`?\s*\((?:default\s+)?`?(\d+\.\d+\.\d+\.\d+:\d+)",
                r"listens on (\d+\.\d+\.\d+\.\d+:\d+)",
            ],
            read: same,
        },
        Default {
            name: "[serve] max_body_bytes",
            value: serve::DEFAULT_MAX_BODY_BYTES.to_string(),
            patterns: &[r"max_body_bytes`?\s*\((?:default\s+)?(\d+)\s+MiB"],
            read: mib_as_bytes,
        },
        Default {
            name: "[serve] max_requests_per_sec",
            value: serve::DEFAULT_MAX_REQUESTS_PER_SEC.to_string(),
            patterns: &[r"max_requests_per_sec`?\s*\((?:default\s+)?(\d[\d,]*)"],
            read: number,
        },
        Default {
            name: "[serve] max_queue",
            value: serve::DEFAULT_MAX_QUEUE.to_string(),
            patterns: &[r"max_queue`?\s*\((?:default\s+)?(\d[\d,]*)"],
            read: number,
        },
        Default {
            name: "[serve] concurrency",
            value: serve::DEFAULT_CONCURRENCY.to_string(),
            patterns: &[r"concurrency`?\s*\((?:default\s+)?(\d[\d,]*)"],
            read: number,
        },
        Default {
            name: "[serve] drain_secs",
            value: serve::DEFAULT_DRAIN_SECS.to_string(),
            patterns: &[r"drain_secs`?\s*\((?:default\s+)?(\d[\d,]*)"],
            read: number,
        },
        Default {
            name: "[serve] header_read_timeout_secs",
            value: serve::DEFAULT_HEADER_READ_TIMEOUT_SECS.to_string(),
            patterns: &[r"header_read_timeout_secs`?\s*\((?:default\s+)?(\d[\d,]*)"],
            read: number,
        },
        Default {
            name: "[serve] body_read_timeout_secs",
            value: serve::DEFAULT_BODY_READ_TIMEOUT_SECS.to_string(),
            patterns: &[r"body_read_timeout_secs`?\s*\((?:default\s+)?(\d[\d,]*)"],
            read: number,
        },
        Default {
            name: "[serve] max_connections",
            value: serve::DEFAULT_MAX_CONNECTIONS.to_string(),
            patterns: &[r"max_connections`?\s*\((?:default\s+)?(\d[\d,]*)"],
            read: number,
        },
        Default {
            name: "[serve] report_link_ttl",
            value: serve::DEFAULT_REPORT_LINK_TTL.to_string(),
            patterns: &[r"report_link_ttl`?\s*\((?:default\s+)?`?(\d+[smhdw])\b"],
            read: same,
        },
        Default {
            name: "[serve] token_env",
            value: serve::DEFAULT_TOKEN_ENV.to_string(),
            patterns: &[r"token_env`?\s*names\s*\(default\s+([A-Z_]+)\)"],
            read: same,
        },
        Default {
            name: "[serve] link_key_env",
            value: serve::DEFAULT_LINK_KEY_ENV.to_string(),
            patterns: &[r"link_key_env`?\s*\(default\s+`?([A-Z_]+)"],
            read: same,
        },
    ]
}

/// Every Markdown file under `dir`.
fn markdown_under(dir: PathBuf, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown_under(path, found);
        } else if path.extension().is_some_and(|e| e == "md") {
            found.push(path);
        }
    }
}

/// The documents that state defaults, each with its text: README.md, the openspec specs, the
/// JSON Schemas, and the `--help` of `diag serve` and `diag investigate alertmanager`.
fn documents() -> Vec<(String, String)> {
    let mut files = vec![repo_file("README.md")];
    markdown_under(repo_file("openspec"), &mut files);
    for entry in std::fs::read_dir(repo_file("docs/schema")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            files.push(path);
        }
    }
    let mut docs: Vec<(String, String)> = files
        .into_iter()
        .map(|f| {
            (
                f.display().to_string(),
                std::fs::read_to_string(&f).unwrap(),
            )
        })
        .collect();
    let env = TestEnv::new();
    for args in [
        &["serve", "--help"][..],
        &["investigate", "alertmanager", "--help"],
    ] {
        let out = env.run(args);
        out.expect(0);
        docs.push((format!("diag {}", args.join(" ")), out.stdout.clone()));
    }
    docs
}

/// The statements of `d` in `docs`: (document, what it says, as `read` makes it).
fn statements(d: &Default, docs: &[(String, String)]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for pattern in d.patterns {
        let re = Regex::new(pattern).unwrap();
        for (name, text) in docs {
            for c in re.captures_iter(text) {
                found.push((name.clone(), (d.read)(&c[1])));
            }
        }
    }
    found
}

#[test]
fn every_stated_default_is_the_codes_constant() {
    let docs = documents();
    let mut wrong = Vec::new();
    for d in defaults() {
        let said = statements(&d, &docs);
        assert!(
            !said.is_empty(),
            "{}: no document states it (patterns {:?})",
            d.name,
            d.patterns
        );
        for (doc, value) in said {
            if value != d.value {
                wrong.push(format!("{doc}: {} is {value}, not {}", d.name, d.value));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_document_stating_another_value_is_caught() {
    let docs = vec![(
        "README.md".to_string(),
        "`[serve] concurrency` (default 3) and `--lookback`, default 20\nminutes; \
         `listen` (`0.0.0.0:9464`)"
            .to_string(),
    )];
    for (name, said) in [
        ("[serve] concurrency", "3"),
        ("the alert look-back, in minutes", "1200"),
        ("[serve] listen", "0.0.0.0:9464"),
    ] {
        let d = defaults().into_iter().find(|d| d.name == name).unwrap();
        let found = statements(&d, &docs);
        assert_eq!(
            found,
            [("README.md".to_string(), said.to_string())],
            "{name}"
        );
        assert_ne!(said, d.value, "{name}");
    }
}

#[test]
fn the_configuration_and_the_command_line_take_the_same_defaults() {
    let c = diag_alerts::config::ServeConfig::default();
    assert_eq!(c.lookback_secs, DEFAULT_LOOKBACK.as_secs());
    assert_eq!(c.listen, serve::DEFAULT_LISTEN);
    assert_eq!(c.report_link_ttl, serve::DEFAULT_REPORT_LINK_TTL);
}
