//! `search_runbooks`: the Markdown runbooks in the configured folders, split into sections at
//! their headings and ranked against a query with BM25.
//!
//! Ranking must be explainable and reproducible (a replayed run must rank the same way), so it
//! is plain BM25 (k1 = 1.2, b = 0.75) over lowercased alphanumeric word tokens, with no
//! stemming, no stop words and no randomness:
//!
//! - A section is the text under one ATX heading (`#` to `######`, up to three spaces of
//!   indentation) down to the next heading of any level; `#` lines inside fenced code blocks
//!   are not headings. Text before the first heading is a section with heading `""`. Setext
//!   headings (underlined with `===`) are not recognized.
//! - A section's tokens are its own heading (counted twice: a heading is a summary), the
//!   headings above it, the file name without extension, and its body. So "checkout
//!   mitigation" finds the "Mitigation" section of `checkout-502.md`.
//! - Scores are rounded to four decimals; equal scores are ordered by path, then heading, then
//!   position in the file. Sections scoring zero are not returned.
//! - Folders are read at every call (runbooks change while `diag` runs), recursively, `.md`
//!   and `.markdown` files only, in sorted order; a missing folder, an unreadable file or a
//!   file over `max_file_bytes` is listed under `"skipped": [{"file", "reason"}]` (absent when
//!   empty). Invalid UTF-8 is converted lossily.
//!
//! Output: `{"hits": [{"path", "heading", "text", "score"}]}`; `text` is the section body cut
//! at `max_section_chars` characters, and a hit whose text was cut has `"text_truncated":
//! true`.

use crate::confine::{Confinement, Refused, OUTSIDE};
use crate::walk::Skip;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};

use crate::search_logs::SkippedFile;
use diag_core::tools::args::{bounded, invalid, Args};
use diag_core::tools::{Tool, ToolContext, ToolError, ToolFuture, ToolSpec};

const K1: f64 = 1.2;
const B: f64 = 0.75;
const MAX_DEPTH: usize = 16;
const MAX_SKIPPED_NOTES: usize = 100;

/// Bounds of one runbook search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunbookSearchLimits {
    /// Hits returned when the call gives no `limit`.
    pub default_limit: usize,
    /// The largest `limit` honoured; a larger one is capped.
    pub max_limit: usize,
    /// A hit's `text` is cut at this many characters.
    pub max_section_chars: usize,
    /// Runbook files read at most per call.
    pub max_files: usize,
    /// Larger files are skipped: a runbook is a page, not a data dump.
    pub max_file_bytes: u64,
    /// Longest accepted `query`, in characters.
    pub max_query_chars: usize,
}

impl Default for RunbookSearchLimits {
    fn default() -> Self {
        RunbookSearchLimits {
            default_limit: 5,
            max_limit: 20,
            max_section_chars: 2000,
            max_files: 2000,
            max_file_bytes: 1024 * 1024,
            max_query_chars: 1024,
        }
    }
}

/// One ranked section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunbookHit {
    pub path: String,
    pub heading: String,
    pub text: String,
    pub score: f64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub text_truncated: bool,
}

/// The tool's output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunbookSearchOutput {
    pub hits: Vec<RunbookHit>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedFile>,
}

/// The `search_runbooks` tool over a fixed list of folders (or single files).
#[derive(Clone)]
pub struct SearchRunbooks {
    inner: Arc<Inner>,
}

struct Inner {
    folders: Vec<PathBuf>,
    limits: RunbookSearchLimits,
    /// Folders links in the runbook folders may lead to (`allow_link_targets`).
    link_targets: Vec<PathBuf>,
}

impl SearchRunbooks {
    pub fn new(folders: Vec<PathBuf>, limits: RunbookSearchLimits) -> Self {
        SearchRunbooks {
            inner: Arc::new(Inner {
                folders,
                limits,
                link_targets: Vec::new(),
            }),
        }
    }

    /// Folders the runbook folders' links may lead to ([`crate::confine`]).
    pub fn with_link_targets(self, link_targets: Vec<PathBuf>) -> Self {
        let inner = Inner {
            folders: self.inner.folders.clone(),
            limits: self.inner.limits.clone(),
            link_targets,
        };
        SearchRunbooks {
            inner: Arc::new(inner),
        }
    }

    /// Ranks the sections against `query` and returns at most `limit` (capped) hits. Blocks on
    /// file I/O.
    pub fn search(&self, query: &str, limit: usize) -> Result<RunbookSearchOutput, ToolError> {
        self.inner.search(query, limit)
    }
}

impl Tool for SearchRunbooks {
    fn spec(&self) -> ToolSpec {
        let l = &self.inner.limits;
        ToolSpec {
            name: "search_runbooks".into(),
            description: "Search the team's Markdown runbooks. Returns the best-matching \
                          sections (path, heading, text, relevance score), best first."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "Words describing the problem, e.g. 'checkout 502 \
                            connection pool'."
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": l.max_limit,
                        "default": l.default_limit,
                        "description": "Maximum number of sections to return."
                    }
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        }
    }

    fn call<'a>(&'a self, arguments: &'a Value, _cx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let args = Args::new(arguments, &["query", "limit"])?;
            let query = args.req_str("query")?.to_string();
            let limit = args
                .opt_positive_int("limit")?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                .unwrap_or(self.inner.limits.default_limit);
            let inner = Arc::clone(&self.inner);
            let output = tokio::task::spawn_blocking(move || inner.search(&query, limit))
                .await
                .map_err(|e| ToolError::Failed(format!("runbook search stopped: {e}")))??;
            serde_json::to_value(output)
                .map_err(|e| ToolError::Failed(format!("runbook search output: {e}")))
        })
    }
}

/// One heading's worth of a runbook.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Section {
    heading: String,
    /// Headings above this one, outermost first.
    parents: Vec<String>,
    body: String,
}

impl Inner {
    fn search(&self, query: &str, limit: usize) -> Result<RunbookSearchOutput, ToolError> {
        if query.chars().count() > self.limits.max_query_chars {
            return Err(invalid(format!(
                "parameter 'query' is longer than {} characters",
                self.limits.max_query_chars
            )));
        }
        let terms: BTreeSet<String> = tokens(query).collect();
        if terms.is_empty() {
            return Err(invalid(format!(
                "parameter 'query' has no words to search for: '{}'",
                bounded(query, 64)
            )));
        }
        let limit = limit.clamp(1, self.limits.max_limit);

        let mut skipped = Vec::new();
        let confine = Confinement::new(
            self.folders.iter().map(PathBuf::as_path),
            self.link_targets.iter().map(PathBuf::as_path),
        );
        let mut files = self.list_files(&mut skipped);
        // A link that leads outside every folder and allowed target is listed as skipped.
        files.retain(|path| {
            let inside = confine.admits(path);
            if !inside {
                note(&mut skipped, path, OUTSIDE.into());
            }
            inside
        });

        // (path, position in file, section, term frequencies, length)
        struct Doc {
            path: String,
            position: usize,
            section: Section,
            tf: BTreeMap<String, u32>,
            len: usize,
        }
        let mut docs = Vec::new();
        for path in &files {
            let text = match read_bounded(&confine, path, self.limits.max_file_bytes) {
                Ok(t) => t,
                Err(reason) => {
                    note(&mut skipped, path, reason);
                    continue;
                }
            };
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            for (position, section) in split_sections(&text).into_iter().enumerate() {
                let mut tf = BTreeMap::new();
                let mut len = 0;
                let heading_tokens: Vec<String> = tokens(&section.heading).collect();
                let sources = heading_tokens
                    .iter()
                    .cloned()
                    .chain(heading_tokens.iter().cloned())
                    .chain(section.parents.iter().flat_map(|p| tokens(p)))
                    .chain(tokens(&stem))
                    .chain(tokens(&section.body));
                for t in sources {
                    *tf.entry(t).or_insert(0) += 1;
                    len += 1;
                }
                docs.push(Doc {
                    path: path.to_string_lossy().into_owned(),
                    position,
                    section,
                    tf,
                    len,
                });
            }
        }

        let n = docs.len() as f64;
        let avg_len = if docs.is_empty() {
            1.0
        } else {
            (docs.iter().map(|d| d.len).sum::<usize>() as f64 / n).max(1.0)
        };
        let idf: BTreeMap<&str, f64> = terms
            .iter()
            .map(|t| {
                let df = docs.iter().filter(|d| d.tf.contains_key(t)).count() as f64;
                (t.as_str(), (1.0 + (n - df + 0.5) / (df + 0.5)).ln())
            })
            .collect();

        let mut scored: Vec<(f64, &Doc)> = docs
            .iter()
            .map(|d| {
                let norm = K1 * (1.0 - B + B * d.len as f64 / avg_len);
                let score: f64 = idf
                    .iter()
                    .map(|(t, idf)| {
                        let tf = f64::from(d.tf.get(*t).copied().unwrap_or(0));
                        idf * tf * (K1 + 1.0) / (tf + norm)
                    })
                    .sum();
                // Rounded before sorting, so float noise cannot reorder near-equal sections.
                ((score * 1e4).round() / 1e4, d)
            })
            .filter(|(score, _)| *score > 0.0)
            .collect();
        scored.sort_by(|(sa, a), (sb, b)| {
            sb.total_cmp(sa)
                .then_with(|| a.path.cmp(&b.path))
                .then_with(|| a.section.heading.cmp(&b.section.heading))
                .then_with(|| a.position.cmp(&b.position))
        });

        let hits = scored
            .into_iter()
            .take(limit)
            .map(|(score, d)| {
                let body = d.section.body.trim();
                let text = bounded(body, self.limits.max_section_chars);
                RunbookHit {
                    path: d.path.clone(),
                    heading: d.section.heading.clone(),
                    text_truncated: text.len() != body.len(),
                    text,
                    score,
                }
            })
            .collect();
        Ok(RunbookSearchOutput { hits, skipped })
    }

    fn list_files(&self, skipped: &mut Vec<SkippedFile>) -> Vec<PathBuf> {
        let mut files = BTreeSet::new();
        for folder in &self.folders {
            match fs::metadata(folder) {
                Ok(m) if m.is_file() => {
                    files.insert(folder.clone());
                }
                Ok(m) if m.is_dir() => walk(folder, &mut files, skipped),
                Ok(_) => note(skipped, folder, "not a regular file or folder".into()),
                Err(e) => note(skipped, folder, io_reason(&e)),
            }
        }
        let mut files: Vec<PathBuf> = files.into_iter().collect();
        if files.len() > self.limits.max_files {
            let rest = files.split_off(self.limits.max_files);
            note(
                skipped,
                &rest[0],
                format!(
                    "more than {} runbooks: this and {} later files were not read",
                    self.limits.max_files,
                    rest.len() - 1
                ),
            );
        }
        files
    }
}

/// The Markdown files of a folder, through the one directory walk ([`crate::walk`]). Only
/// what concerns a runbook is noted: a Markdown file that could not be listed, a folder too
/// deep; other files and symlinked folders are passed over.
fn walk(dir: &Path, files: &mut BTreeSet<PathBuf>, skipped: &mut Vec<SkippedFile>) {
    let walked = crate::walk::files_under(dir, MAX_DEPTH);
    for (path, reason) in walked.skipped {
        if is_markdown(&path) || matches!(reason, Skip::TooDeep(_)) {
            note(skipped, &path, reason.to_string());
        }
    }
    files.extend(walked.files.into_iter().filter(|p| is_markdown(p)));
}

fn is_markdown(path: &Path) -> bool {
    path.extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .is_some_and(|e| e == "md" || e == "markdown")
}

fn note(skipped: &mut Vec<SkippedFile>, path: &Path, reason: String) {
    if skipped.len() < MAX_SKIPPED_NOTES {
        skipped.push(SkippedFile {
            file: path.to_string_lossy().into_owned(),
            reason: bounded(&reason, 200),
        });
    }
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "not found".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// The file as text, or why it was skipped. Reads at most `max + 1` bytes, so a file that
/// grows while it is read is still bounded.
fn read_bounded(confine: &Confinement, path: &Path, max: u64) -> Result<String, String> {
    // What is opened is what is checked: a file replaced by a link after listing is not read.
    let file = confine.open(path).map_err(|e| match e {
        Refused::Outside => OUTSIDE.to_string(),
        Refused::Io(e) => io_reason(&e),
    })?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_reason(&e))?;
    if bytes.len() as u64 > max {
        return Err(format!("larger than {max} bytes"));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Lowercased runs of alphanumeric characters.
fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
}

/// Splits Markdown into sections at ATX headings outside fenced code blocks.
fn split_sections(text: &str) -> Vec<Section> {
    let mut sections = Vec::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut current = Section {
        heading: String::new(),
        parents: Vec::new(),
        body: String::new(),
    };
    let mut fence: Option<(char, usize)> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let trimmed = line.trim_start_matches(' ');
        if indent <= 3 {
            if let Some((ch, n)) = fence_marker(trimmed) {
                match fence {
                    None => fence = Some((ch, n)),
                    Some((open, len)) if open == ch && n >= len => fence = None,
                    Some(_) => {}
                }
            } else if fence.is_none() {
                if let Some((level, heading)) = atx_heading(trimmed) {
                    if !current.heading.is_empty() || !current.body.trim().is_empty() {
                        sections.push(current);
                    }
                    while stack.last().is_some_and(|(l, _)| *l >= level) {
                        stack.pop();
                    }
                    current = Section {
                        heading: heading.clone(),
                        parents: stack.iter().map(|(_, h)| h.clone()).collect(),
                        body: String::new(),
                    };
                    stack.push((level, heading));
                    continue;
                }
            }
        }
        current.body.push_str(line);
        current.body.push('\n');
    }
    if !current.heading.is_empty() || !current.body.trim().is_empty() {
        sections.push(current);
    }
    sections
}

fn fence_marker(line: &str) -> Option<(char, usize)> {
    let ch = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = line.chars().take_while(|c| *c == ch).count();
    (n >= 3).then_some((ch, n))
}

/// `## Title ##` → (2, "Title"); `#hashtag` is not a heading.
fn atx_heading(line: &str) -> Option<(usize, String)> {
    let level = line.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &line[level..];
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let text = rest.trim();
    // An optional closing sequence of `#`s, when separated by a space.
    let without_closing = text.trim_end_matches('#');
    let text = if without_closing.is_empty() || without_closing.ends_with([' ', '\t']) {
        without_closing.trim_end()
    } else {
        text
    };
    Some((level, text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_follow_headings_outside_fences() {
        let md = "intro line\n# Checkout\nbody 1\n```\n# not a heading\n```\n## Mitigation ##\nstep\n#tag\n";
        let s = split_sections(md);
        let headings: Vec<&str> = s.iter().map(|s| s.heading.as_str()).collect();
        assert_eq!(headings, ["", "Checkout", "Mitigation"]);
        assert!(s[1].body.contains("# not a heading"));
        assert_eq!(s[2].parents, ["Checkout"]);
        assert!(s[2].body.contains("#tag"));
        assert_eq!(atx_heading("### Deep ###"), Some((3, "Deep".into())));
        assert_eq!(atx_heading("# C#"), Some((1, "C#".into())));
    }

    #[test]
    fn tokens_are_lowercased_words() {
        let t: Vec<String> = tokens("Checkout-Service returned HTTP 502!").collect();
        assert_eq!(t, ["checkout", "service", "returned", "http", "502"]);
    }
}
