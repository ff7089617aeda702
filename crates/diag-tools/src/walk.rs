//! The one directory walk every place that lists folders uses (`search_logs`,
//! `search_runbooks`, `diag replay`, `diag eval`'s scenario folders, the run-file upgrade):
//! `walkdir`, with the link policy
//! written once (openspec/specs/tools/spec.md, "Tools read only what the operator
//! configured").
//!
//! - Entries come in sorted order (by file name at each level), so what is listed does not
//!   depend on the order a folder happens to list its entries.
//! - A symlinked folder is never walked (links can form cycles); it is listed as skipped. A
//!   link to a file is listed as a file: whoever reads it confines it ([`crate::confine`]).
//! - A folder deeper than `max_depth` below the root is listed as skipped, not walked.
//! - FIFOs, sockets and devices are listed as skipped (a read could block forever).
//! - An entry that cannot be read (permission denied, deleted while walking) is listed as
//!   skipped with its reason.

use std::path::{Path, PathBuf};

use walkdir::WalkDir;

/// Why an entry was not listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// A link to a folder: never walked (links can form cycles).
    SymlinkedFolder,
    /// A FIFO, socket or device: a read could block forever.
    NotRegular,
    /// A folder this many levels deep or deeper.
    TooDeep(usize),
    /// The entry could not be read (a stable, short reason).
    Unreadable(String),
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::SymlinkedFolder => f.write_str("symlinked directory not followed"),
            Skip::NotRegular => f.write_str("not a regular file"),
            Skip::TooDeep(max) => write!(f, "deeper than {max} directories; not searched"),
            Skip::Unreadable(reason) => f.write_str(reason),
        }
    }
}

/// What a walk found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Walked {
    /// Regular files and links to files, in walk order.
    pub files: Vec<PathBuf>,
    /// Entries not listed, each with its reason.
    pub skipped: Vec<(PathBuf, Skip)>,
}

/// An I/O error as a stable, short reason (the OS text varies between platforms).
fn unreadable(e: &std::io::Error) -> Skip {
    Skip::Unreadable(match e.kind() {
        std::io::ErrorKind::NotFound => "not found (deleted, or a broken symlink)".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => e.to_string(),
    })
}

/// An entry the walk could not read, as a skipped entry with its reason.
fn walk_error(e: &walkdir::Error, root: &Path) -> (PathBuf, Skip) {
    let path = e.path().unwrap_or(root).to_path_buf();
    let reason = match e.io_error() {
        Some(io) => unreadable(io),
        None => Skip::Unreadable(e.to_string()),
    };
    (path, reason)
}

/// The files under `root` (a folder; a root that is a file is itself), at most `max_depth`
/// folders below it.
pub fn files_under(root: &Path, max_depth: usize) -> Walked {
    let mut out = Walked::default();
    let mut it = WalkDir::new(root)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter();
    while let Some(entry) = it.next() {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                out.skipped.push(walk_error(&e, root));
                continue;
            }
        };
        let ft = entry.file_type();
        let path = entry.path().to_path_buf();
        if ft.is_dir() {
            if entry.depth() >= max_depth && entry.depth() > 0 {
                out.skipped.push((path, Skip::TooDeep(max_depth)));
                it.skip_current_dir();
            }
            continue;
        }
        if ft.is_symlink() {
            // `metadata` follows the link: a link to a folder is not walked, a link to a file
            // is listed, a broken link is noted.
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => out.skipped.push((path, Skip::SymlinkedFolder)),
                Ok(m) if m.is_file() => out.files.push(path),
                Ok(_) => out.skipped.push((path, Skip::NotRegular)),
                Err(e) => out.skipped.push((path, unreadable(&e))),
            }
            continue;
        }
        if ft.is_file() {
            out.files.push(path);
        } else {
            out.skipped.push((path, Skip::NotRegular));
        }
    }
    out
}

/// What a listing of the folders directly inside a folder found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Folders {
    /// Folders (never links to folders), in name order.
    pub folders: Vec<PathBuf>,
    /// Entries not listed, each with its reason; files are not listed and not noted.
    pub skipped: Vec<(PathBuf, Skip)>,
}

/// The folders directly inside `root`, with the same link policy as [`files_under`]: a link
/// to a folder is noted as skipped, not listed.
pub fn folders_in(root: &Path) -> Result<Folders, std::io::Error> {
    let mut out = Folders::default();
    let it = WalkDir::new(root)
        .follow_links(false)
        .sort_by_file_name()
        .min_depth(1)
        .max_depth(1)
        .into_iter();
    for entry in it {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                // The root itself unreadable is the caller's error; an entry is a note.
                if e.depth() == 0 {
                    return Err(e
                        .into_io_error()
                        .unwrap_or_else(|| std::io::Error::other("unreadable folder")));
                }
                out.skipped.push(walk_error(&e, root));
                continue;
            }
        };
        let ft = entry.file_type();
        if ft.is_dir() {
            out.folders.push(entry.into_path());
        } else if ft.is_symlink() && std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()) {
            out.skipped.push((entry.into_path(), Skip::SymlinkedFolder));
        }
    }
    Ok(out)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    #[test]
    fn sorted_files_links_to_files_and_no_cycles() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir_all(d.join("b/deep")).unwrap();
        fs::write(d.join("b/deep/z.log"), "z").unwrap();
        fs::write(d.join("a.log"), "a").unwrap();
        fs::write(d.join("c.log"), "c").unwrap();
        symlink(d.join("a.log"), d.join("link.log")).unwrap();
        // A cycle: a link to the folder itself.
        symlink(d, d.join("b/loop")).unwrap();
        symlink(d.join("missing"), d.join("broken.log")).unwrap();
        let w = files_under(d, 8);
        let names: Vec<String> = w
            .files
            .iter()
            .map(|p| p.strip_prefix(d).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["a.log", "b/deep/z.log", "c.log", "link.log"]);
        let skipped: Vec<(String, String)> = w
            .skipped
            .iter()
            .map(|(p, r)| {
                (
                    p.strip_prefix(d).unwrap().display().to_string(),
                    r.to_string(),
                )
            })
            .collect();
        assert_eq!(
            skipped,
            [
                (
                    "b/loop".to_string(),
                    "symlinked directory not followed".to_string()
                ),
                (
                    "broken.log".to_string(),
                    "not found (deleted, or a broken symlink)".to_string()
                ),
            ]
        );
    }

    #[test]
    fn folders_deeper_than_the_bound_are_skipped_and_a_file_root_is_itself() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir_all(d.join("1/2/3")).unwrap();
        fs::write(d.join("1/top.log"), "x").unwrap();
        fs::write(d.join("1/2/3/low.log"), "x").unwrap();
        let w = files_under(d, 2);
        assert_eq!(w.files, [d.join("1/top.log")]);
        assert_eq!(w.skipped, [(d.join("1/2"), Skip::TooDeep(2))]);
        let f = files_under(&d.join("1/top.log"), 2);
        assert_eq!(f.files, [d.join("1/top.log")]);
    }

    #[test]
    fn folders_in_lists_folders_in_name_order_and_notes_linked_ones() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir_all(d.join("b/inner")).unwrap();
        fs::create_dir_all(d.join("a")).unwrap();
        fs::write(d.join("file.toml"), "x").unwrap();
        symlink(d.join("a"), d.join("c-link")).unwrap();
        let f = folders_in(d).unwrap();
        assert_eq!(f.folders, [d.join("a"), d.join("b")]);
        assert_eq!(f.skipped, [(d.join("c-link"), Skip::SymlinkedFolder)]);
        assert!(folders_in(&d.join("missing")).is_err());
    }
}
