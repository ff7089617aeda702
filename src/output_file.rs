//! Writing an output file (a report, a run file, JUnit XML, an eval report): one function for
//! every command that writes one (openspec/specs/cli/spec.md, "Writing an output file").
//!
//! - A path that does not exist, or names a regular file, is replaced atomically: the bytes
//!   go to a temporary file beside it, which is then renamed over it, so a reader never sees
//!   half a file. An existing file keeps its permissions.
//! - A symbolic link is written through to the file it names, as `cp` and shells do: the link
//!   stays, and its target (a regular file, replaced atomically; a device or FIFO, written in
//!   place) gets the bytes. A link to nothing is refused: diag does not create a file where a
//!   link points by accident.
//! - A device, FIFO or socket is written in place (opened for writing, never created,
//!   truncated or replaced): `-o /dev/stdout` and `-o /dev/null` do what a shell user expects,
//!   and `-o /dev/full` fails with "No space left on device".
//! - A folder is refused, and so is a path whose folder does not exist (`the folder missing
//!   does not exist`).
//! - A new file is created as a shell's `>` creates one: read-write for everyone the umask
//!   allows (`0644` under the usual `022`), since reports, run files and JUnit XML are written
//!   to be shared; an operator who wants them private sets a stricter umask (`077`: `0600`).
//!   An existing file keeps its permissions.
//!
//! Every failure is an `io::Error` whose message the caller prints as one line; it never
//! names the temporary file, which the operator did not ask for.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` as the module documentation says.
pub fn write_output(path: &Path, bytes: &[u8]) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => replace(path, bytes, None),
        Err(e) => Err(e),
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = fs::canonicalize(path).map_err(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        "it is a link to a file that does not exist",
                    )
                } else {
                    e
                }
            })?;
            let meta = fs::metadata(&target)?;
            write_existing(&target, &meta, bytes)
        }
        Ok(meta) => write_existing(path, &meta, bytes),
    }
}

fn write_existing(path: &Path, meta: &fs::Metadata, bytes: &[u8]) -> io::Result<()> {
    if meta.is_dir() {
        Err(io::Error::other("it is a folder"))
    } else if meta.is_file() {
        replace(path, bytes, Some(meta.permissions()))
    } else {
        in_place(path, bytes)
    }
}

/// A device, FIFO or socket: opened for writing, never created or truncated.
fn in_place(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = fs::OpenOptions::new().write(true).open(path)?;
    file.write_all(bytes)?;
    file.flush()
}

/// A regular file or a new one: a temporary file beside it, synced, then renamed over it.
fn replace(path: &Path, bytes: &[u8], permissions: Option<fs::Permissions>) -> io::Result<()> {
    let dir: PathBuf = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !dir.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("the folder {} does not exist", dir.display()),
        ));
    }
    let in_folder = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!(
                "{} (in the folder {})",
                io::Error::from(e.kind()),
                dir.display()
            ),
        )
    };
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    #[cfg(unix)]
    if permissions.is_none() {
        use std::os::unix::fs::PermissionsExt;
        // Created with 0666 less the umask, as `>` would.
        builder.permissions(fs::Permissions::from_mode(0o666));
    }
    let mut tmp = builder.tempfile_in(&dir).map_err(in_folder)?;
    tmp.write_all(bytes).map_err(in_folder)?;
    tmp.as_file().sync_all().map_err(in_folder)?;
    if let Some(p) = permissions {
        fs::set_permissions(tmp.path(), p).map_err(in_folder)?;
    }
    tmp.persist(path)
        .map(|_| ())
        .map_err(|e| in_folder(e.error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_and_a_regular_file_are_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.md");
        write_output(&path, b"first").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"first");
        write_output(&path, b"second, longer").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second, longer");
        // No temporary file is left beside it.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// The umask of this process, as Linux reports it (`Umask:\t0022`); `None` elsewhere.
    fn umask() -> Option<u32> {
        let status = fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("Umask:"))?;
        u32::from_str_radix(line.trim_start_matches("Umask:").trim(), 8).ok()
    }

    #[cfg(unix)]
    #[test]
    fn a_new_file_follows_the_umask_and_a_missing_folder_is_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.html");
        write_output(&path, b"x").unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        if let Some(umask) = umask() {
            assert_eq!(mode, 0o666 & !umask, "umask {umask:o}");
        }
        let missing = dir.path().join("missing").join("run.json");
        let e = write_output(&missing, b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            e.to_string(),
            format!(
                "the folder {} does not exist",
                dir.path().join("missing").display()
            )
        );
    }

    #[cfg(unix)]
    #[test]
    fn an_existing_file_keeps_its_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        fs::write(&path, "old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        write_output(&path, b"new").unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
    }

    #[cfg(unix)]
    #[test]
    fn a_link_is_written_through_and_stays_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.html");
        let link = dir.path().join("link.html");
        fs::write(&target, "old").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_output(&link, b"report").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&target).unwrap(), b"report");
    }

    #[cfg(unix)]
    #[test]
    fn a_link_to_nothing_and_a_folder_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("dangling.md");
        std::os::unix::fs::symlink(dir.path().join("missing.md"), &link).unwrap();
        let e = write_output(&link, b"x").unwrap_err();
        assert_eq!(e.to_string(), "it is a link to a file that does not exist");
        assert!(!dir.path().join("missing.md").exists());
        let e = write_output(dir.path(), b"x").unwrap_err();
        assert_eq!(e.to_string(), "it is a folder");
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || fs::read(fifo).unwrap())
        };
        write_output(&fifo, b"through the pipe").unwrap();
        assert_eq!(reader.join().unwrap(), b"through the pipe");
        let meta = fs::symlink_metadata(&fifo).unwrap();
        use std::os::unix::fs::FileTypeExt;
        assert!(meta.file_type().is_fifo());
    }
}
