//! Confinement (openspec/specs/tools/spec.md, "Tools read only what the operator
//! configured"): a log or runbook file is read only when its resolved location lies under the
//! resolved location of a configured source, or under a folder the source's configuration
//! says links may lead to (`allow_link_targets`).
//!
//! - A link whose target stays inside a configured source is followed; one that leaves them
//!   is skipped and listed as skipped with its reason, without naming where it leads.
//! - The check is made twice: when files are listed (so the skip is reported), and on the
//!   file actually opened, by the location the operating system gives for the open file
//!   (`/proc/self/fd/N` on Linux), so a file replaced by a link between listing and reading
//!   is never read: what was opened is what is checked, with no window between them. Where
//!   the system does not say, the path is resolved right after opening.

use std::fs::{self, File};
use std::io;
use std::path::{Component, Path, PathBuf};

/// The reason a file outside the configured sources is skipped.
pub const OUTSIDE: &str =
    "a link that leads outside the configured sources (see allow_link_targets); not read";

/// Why a file was not opened.
#[derive(Debug)]
pub enum Refused {
    /// Its resolved location lies outside every source and allowed target ([`OUTSIDE`]).
    Outside,
    /// It could not be opened.
    Io(io::Error),
}

/// Where files may be read from: the resolved configured sources and the allowed link
/// targets.
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    roots: Vec<PathBuf>,
}

impl Confinement {
    /// The resolved location of each source (for a glob pattern, of its leading folders
    /// without a pattern character) and of each allowed link target. A source that does not
    /// resolve (not there yet) confines nothing in.
    pub fn new<'a>(
        sources: impl IntoIterator<Item = &'a Path>,
        link_targets: impl IntoIterator<Item = &'a Path>,
    ) -> Self {
        let roots = sources
            .into_iter()
            .map(source_root)
            .chain(link_targets.into_iter().map(Path::to_path_buf))
            .filter_map(|p| fs::canonicalize(p).ok())
            .collect();
        Confinement { roots }
    }

    /// Whether a resolved location lies under a root.
    pub fn admits_resolved(&self, resolved: &Path) -> bool {
        self.roots.iter().any(|r| resolved.starts_with(r))
    }

    /// Whether `path`, resolved (links followed), lies under a root; `false` when it does
    /// not resolve.
    pub fn admits(&self, path: &Path) -> bool {
        fs::canonicalize(path).is_ok_and(|p| self.admits_resolved(&p))
    }

    /// Opens `path` for reading and checks the file opened.
    pub fn open(&self, path: &Path) -> Result<File, Refused> {
        let file = File::open(path).map_err(Refused::Io)?;
        let opened = opened_location(&file, path).map_err(Refused::Io)?;
        if self.admits_resolved(&opened) {
            Ok(file)
        } else {
            Err(Refused::Outside)
        }
    }
}

/// The leading folders of a glob pattern without a pattern character, or the path itself.
fn source_root(source: &Path) -> PathBuf {
    let is_pattern =
        source.to_string_lossy().contains(['*', '?', '[']) && fs::symlink_metadata(source).is_err();
    if !is_pattern {
        return source.to_path_buf();
    }
    source
        .components()
        .take_while(|c| match c {
            Component::Normal(n) => !n.to_string_lossy().contains(['*', '?', '[']),
            _ => true,
        })
        .collect()
}

/// The location of an open file as the system knows it.
#[cfg(target_os = "linux")]
fn opened_location(file: &File, path: &Path) -> io::Result<PathBuf> {
    use std::os::fd::AsRawFd;
    // Without /proc (a container that does not mount it), the path right after opening.
    fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).or_else(|_| fs::canonicalize(path))
}

#[cfg(not(target_os = "linux"))]
fn opened_location(_file: &File, path: &Path) -> io::Result<PathBuf> {
    fs::canonicalize(path)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn links_inside_are_followed_and_links_outside_refused() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("passwd");
        fs::write(&secret, "root:x:0:0").unwrap();
        let src = tempfile::tempdir().unwrap();
        let real = src.path().join("app.log");
        fs::write(&real, "ok").unwrap();
        symlink(&real, src.path().join("current.log")).unwrap();
        symlink(&secret, src.path().join("passwd.log")).unwrap();
        // A chain: inside → inside → outside.
        symlink(src.path().join("passwd.log"), src.path().join("chain.log")).unwrap();
        let c = Confinement::new([src.path()], []);
        assert!(c.admits(&real));
        assert!(c.admits(&src.path().join("current.log")));
        assert!(!c.admits(&src.path().join("passwd.log")));
        assert!(!c.admits(&src.path().join("chain.log")));
        assert!(c.open(&src.path().join("current.log")).is_ok());
        assert!(matches!(
            c.open(&src.path().join("passwd.log")),
            Err(Refused::Outside)
        ));
        // An allowed link target admits what lies below it.
        let allowed = Confinement::new([src.path()], [outside.path()]);
        assert!(allowed.admits(&src.path().join("passwd.log")));
    }

    #[test]
    fn a_file_replaced_by_a_link_after_listing_is_not_read() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("passwd");
        fs::write(&secret, "root:x:0:0").unwrap();
        let src = tempfile::tempdir().unwrap();
        let log = src.path().join("app.log");
        fs::write(&log, "ok").unwrap();
        let c = Confinement::new([src.path()], []);
        // Listed while it was a file inside…
        assert!(c.admits(&log));
        // …then replaced by a link before it is read: the file opened is what is checked.
        fs::remove_file(&log).unwrap();
        symlink(&secret, &log).unwrap();
        assert!(matches!(c.open(&log), Err(Refused::Outside)));
    }

    #[test]
    fn a_glob_confines_to_its_leading_folders() {
        let src = tempfile::tempdir().unwrap();
        fs::create_dir(src.path().join("containers")).unwrap();
        let f = src.path().join("containers/a.log");
        fs::write(&f, "x").unwrap();
        let pattern = src.path().join("containers/*.log");
        let c = Confinement::new([pattern.as_path()], []);
        assert!(c.admits(&f));
        assert!(!c.admits(&src.path().join("other.log")));
    }
}
