//! Files replaced atomically: written to a temporary file in the same directory, flushed to
//! disk, then renamed over the target. Readers see the old file or the new one, never a part;
//! a failed write (full disk, killed process) leaves the old file and no stray temporary.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::error::{Error, Result};

/// Writes `path` through `fill`, atomically. `action` names the work in errors (`writing
/// profile`). Parent directories are created.
pub(crate) fn write(
    path: &Path,
    action: &'static str,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<()> {
    let io = |source| Error::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => {
            fs::create_dir_all(dir).map_err(io)?;
            dir.to_path_buf()
        }
        None => PathBuf::from("."),
    };
    let temp = temp_path(&dir, path);
    let file = File::options()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(io)?;
    // Removes the temporary unless it was renamed: on an error, and on a panic in `fill`.
    let mut pending = Temporary(Some(temp));
    let mut out = BufWriter::new(file);
    fill(&mut out).map_err(io)?;
    let file = out
        .into_inner()
        .map_err(io::IntoInnerError::into_error)
        .map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    if let Some(temp) = pending.0.take() {
        if let Err(e) = fs::rename(&temp, path) {
            let _ = fs::remove_file(&temp);
            return Err(io(e));
        }
    }
    Ok(())
}

/// A temporary file removed when dropped, unless taken.
struct Temporary(Option<PathBuf>);

impl Drop for Temporary {
    fn drop(&mut self) {
        if let Some(temp) = self.0.take() {
            let _ = fs::remove_file(temp);
        }
    }
}

/// Creates `dir` (and its parents) and checks that a file can be created in it: creates and
/// removes a temporary file, named as [`write`] names its temporaries.
pub(crate) fn probe_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let temp = temp_path(dir, &dir.join("probe"));
    File::options().write(true).create_new(true).open(&temp)?;
    fs::remove_file(&temp)
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A temporary name beside the target, unique within the process and across processes.
fn temp_path(dir: &Path, path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".to_string());
    dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Relaxed)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("spanprof-atomic-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let d = dir("ok");
        let path = d.join("sub").join("out.txt");
        write(&path, "writing test", |w| w.write_all(b"first")).unwrap();
        write(&path, "writing test", |w| w.write_all(b"second")).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "second");
        let names: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failing_writer_keeps_the_old_file() {
        let d = dir("fail");
        let path = d.join("out.txt");
        write(&path, "writing test", |w| w.write_all(b"old")).unwrap();
        let err = write(&path, "writing test", |w| {
            w.write_all(b"partial")?;
            Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("out.txt"), "{err}");
        assert!(err.to_string().contains("disk full"), "{err}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1);
        fs::remove_dir_all(&d).unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_unwritable_directory_is_an_error_naming_the_file() {
        // /proc accepts no new directories or files.
        let path = Path::new("/proc/spanprof-no-such-dir/out.json");
        let err = write(path, "writing profile", |w| w.write_all(b"x")).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("writing profile /proc/spanprof-no-such-dir/out.json"),
            "{msg}"
        );
    }
}
