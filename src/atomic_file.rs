//! Files replaced atomically: written to a temporary file in the same directory, flushed to
//! disk, then renamed over the target. Readers see the old file or the new one, never a part;
//! a failed write (full disk, killed process) leaves the old file and no stray temporary.
//!
//! Only a regular file (or a path where nothing is yet) is replaced so: a symbolic link is
//! followed to its final target, which is replaced (the link stays), and a path that is neither
//! a regular file nor a directory (a fifo, a device such as `/dev/null`, `/dev/stdout` on a pipe
//! or a terminal) is written in place, since renaming over it would destroy it.
//!
//! Every temporary file (these, and the `.partial` files of Chrome trace windows) is a
//! [`Temporary`], listed in a process-wide registry while it exists, so that an exit that
//! cannot wait for the writes (a second signal, see `crate::signals`) removes them:
//! [`abandon_temporaries`].

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Writes `path` through `fill`, atomically. `action` names the work in errors (`writing
/// profile`). Parent directories are created.
///
/// What is at `path` decides how:
/// - nothing, or a regular file: `fill` writes a temporary file beside it, synced, then renamed
///   over `path`; readers see the old file or the new one, and a failure leaves the old one;
/// - a symbolic link (or a chain of them): followed; the temporary goes beside the final
///   target and replaces it, the link is kept (a dangling link's target is created);
/// - anything else but a directory (a fifo, a character or block device, a socket): written
///   in place, opened for writing and truncated, without a temporary or a rename: such a file
///   cannot be replaced atomically, and replacing it would destroy it (`-o /dev/null` would
///   leave a regular file in `/dev`). A fifo blocks until a reader opens it; a failure midway
///   leaves what was written; a socket cannot be opened and is an error.
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
    // What the path leads to, symbolic links followed by the system (also through /proc's
    // links, such as /dev/stdout's, which name no file a path can reach).
    let found = match fs::metadata(path) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(e)),
    };
    if let Some(meta) = &found {
        if !meta.is_file() && !meta.is_dir() {
            return write_in_place(path, fill).map_err(io);
        }
    }
    let target = final_target(path).map_err(io)?;
    if let (Some(meta), true) = (&found, target != path) {
        // The links led somewhere other than what the system opens (a /proc link to a deleted
        // file): writing in place is the one safe choice.
        if !same_file(meta, &target) {
            return write_in_place(path, fill).map_err(io);
        }
    }
    replace(&target, fill).map_err(io)
}

/// Writes the file at `path` as it is (no temporary, no rename): truncated, then filled.
fn write_in_place(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let file = File::options().write(true).truncate(true).open(path)?;
    let mut out = BufWriter::new(file);
    fill(&mut out)?;
    out.flush()
}

/// Writes `path` (no link) through a temporary file renamed over it.
fn replace(path: &Path, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let dir = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => {
            fs::create_dir_all(dir)?;
            dir.to_path_buf()
        }
        None => PathBuf::from("."),
    };
    // Removed when dropped unless renamed: on an error, and on a panic in `fill`.
    let (file, temp) = Temporary::create(temp_path(&dir, path), File::options().create_new(true))?;
    let mut out = BufWriter::new(file);
    fill(&mut out)?;
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;
    drop(file);
    temp.rename_to(path)
}

/// Where the symbolic links at `path` lead: `path` itself if it is no link (or does not
/// exist), else the last path of the chain, which is not a link (and may not exist). A
/// relative link is read from the link's directory, as the system does.
fn final_target(path: &Path) -> io::Result<PathBuf> {
    // The system's own limit (Linux's MAXSYMLINKS).
    const MAX_LINKS: usize = 40;
    let mut at = path.to_path_buf();
    for _ in 0..=MAX_LINKS {
        match fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let link = fs::read_link(&at)?;
                at = match at.parent() {
                    Some(dir) if link.is_relative() => dir.join(link),
                    _ => link,
                };
            }
            _ => return Ok(at),
        }
    }
    Err(io::Error::other("too many levels of symbolic links"))
}

/// Whether `path` is the file `meta` describes (where the system tells; elsewhere assumed).
fn same_file(meta: &fs::Metadata, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(path).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = (meta, path);
        true
    }
}

/// A temporary file being written: listed in a [`Registry`] from its creation (under the
/// registry's lock) until it is renamed or removed, and removed when dropped unless renamed.
pub(crate) struct Temporary {
    /// `None` once renamed or removed.
    path: Option<PathBuf>,
    registry: &'static Registry,
}

impl Temporary {
    /// Creates the file at `path` for writing, opened with `options` (`create_new` or
    /// `create` and `truncate`), listed in the process's registry. Fails without creating
    /// anything once [`abandon_temporaries`] has run: the process is exiting.
    pub(crate) fn create(path: PathBuf, options: &mut fs::OpenOptions) -> io::Result<(File, Self)> {
        TEMPORARIES.create(path, options)
    }

    /// Where the file is (until it is renamed or removed).
    #[cfg_attr(not(feature = "chrome"), allow(dead_code))]
    pub(crate) fn path(&self) -> &Path {
        self.path.as_deref().unwrap_or(Path::new(""))
    }

    /// Renames the file over `target`; on failure the file is removed.
    pub(crate) fn rename_to(mut self, target: &Path) -> io::Result<()> {
        let Some(temp) = self.path.take() else {
            return Ok(());
        };
        let renamed = fs::rename(&temp, target);
        if renamed.is_err() {
            let _ = fs::remove_file(&temp);
        }
        self.registry.forget(&temp);
        renamed
    }

    /// Removes the file (once; later calls do nothing).
    pub(crate) fn remove(&mut self) -> io::Result<()> {
        let Some(temp) = self.path.take() else {
            return Ok(());
        };
        let removed = fs::remove_file(&temp);
        self.registry.forget(&temp);
        removed
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// The temporary files of a process that exist now (made by [`Temporary::create`]).
///
/// Process-wide, because the exit that removes them is: [`TEMPORARIES`] is the one instance
/// outside tests. Its mutex is taken when a file is written (at the end of a run, and once
/// per window or export), never on the hot path, and never in a signal handler: the exit path
/// runs on a thread of its own.
struct Registry {
    state: Mutex<Listed>,
}

struct Listed {
    /// Set by [`Registry::abandon`]: no temporary may be created any more.
    closed: bool,
    paths: Vec<PathBuf>,
}

static TEMPORARIES: Registry = Registry::new();

impl Registry {
    const fn new() -> Self {
        Self {
            state: Mutex::new(Listed {
                closed: false,
                paths: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Listed> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates and lists the file, under the lock: [`abandon`](Self::abandon) sees every file
    /// created before it and none is created after it.
    fn create(
        &'static self,
        path: PathBuf,
        options: &mut fs::OpenOptions,
    ) -> io::Result<(File, Temporary)> {
        let mut listed = self.lock();
        if listed.closed {
            return Err(io::Error::other(
                "the process is exiting: no file is written any more",
            ));
        }
        let file = options.write(true).open(&path)?;
        listed.paths.push(path.clone());
        drop(listed);
        Ok((
            file,
            Temporary {
                path: Some(path),
                registry: self,
            },
        ))
    }

    fn forget(&self, path: &Path) {
        let mut listed = self.lock();
        if let Some(i) = listed.paths.iter().position(|p| p == path) {
            listed.paths.swap_remove(i);
        }
    }

    /// Refuses new temporaries from now on and removes those that exist; returns how many
    /// were removed.
    fn abandon(&self) -> usize {
        let paths = {
            let mut listed = self.lock();
            listed.closed = true;
            std::mem::take(&mut listed.paths)
        };
        // A file renamed meanwhile is not there any more (its target is complete); one being
        // written is unlinked, and its writer's later rename fails: the target keeps its
        // previous version.
        paths.iter().filter(|p| fs::remove_file(p).is_ok()).count()
    }
}

/// Whether `path` is listed as a temporary of this process now.
#[cfg(all(test, feature = "chrome"))]
pub(crate) fn is_listed(path: &Path) -> bool {
    TEMPORARIES.lock().paths.iter().any(|p| p == path)
}

/// For an exit that does not wait for the files being written (a second signal while the
/// outputs are finished): removes every temporary file of this process that still exists, and
/// makes every later attempt to write one fail, so none is created after. Returns how many
/// were removed. Blocks on the file system (`unlink`): call it from a thread that may be left
/// behind, never from a signal handler.
#[cfg_attr(not(feature = "signals"), allow(dead_code))]
pub(crate) fn abandon_temporaries() -> usize {
    TEMPORARIES.abandon()
}

/// Creates `dir` (and its parents) and checks that a file can be created in it: creates and
/// removes a temporary file, named as [`write`] names its temporaries.
pub(crate) fn probe_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let (_, mut temp) = Temporary::create(
        temp_path(dir, &dir.join("probe")),
        File::options().create_new(true),
    )?;
    temp.remove()
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

    /// Abandoning removes the temporaries that exist (not those renamed or removed before) and
    /// refuses new ones; the writer of an abandoned file fails to rename it.
    #[test]
    fn abandoning_removes_the_temporaries_and_refuses_new_ones() {
        let d = dir("abandon");
        fs::create_dir_all(&d).unwrap();
        // A registry of this test's own: abandoning the process's would stop other tests.
        let registry: &'static Registry = Box::leak(Box::new(Registry::new()));
        let create = |name: &str| {
            let options = &mut File::options();
            registry.create(d.join(name), options.create_new(true))
        };
        let (_, renamed) = create(".a.tmp").unwrap();
        let (_, mut removed) = create(".b.tmp").unwrap();
        let (mut file, written) = create(".c.tmp").unwrap();
        let (_, _kept) = create(".d.partial").unwrap();
        renamed.rename_to(&d.join("a")).unwrap();
        removed.remove().unwrap();
        assert_eq!(registry.lock().paths.len(), 2);
        assert_eq!(registry.abandon(), 2);
        assert_eq!(temporaries(&d), Vec::<PathBuf>::new());
        assert!(!d.join(".d.partial").exists());
        // The writer of `.c.tmp` goes on writing into the unlinked file; its rename fails and
        // its target is not created.
        file.write_all(b"late").unwrap();
        assert!(written.rename_to(&d.join("c")).is_err());
        assert!(!d.join("c").exists());
        let refused = create(".e.tmp").err().expect("a temporary after abandon");
        assert!(refused.to_string().contains("exiting"), "{refused}");
        assert!(!d.join(".e.tmp").exists());
        let names: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a"]);
        fs::remove_dir_all(&d).unwrap();
    }

    /// Temporaries (`.NAME.PID.N.tmp`) left in `dir`.
    fn temporaries(dir: &Path) -> Vec<PathBuf> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".tmp"))
            .collect()
    }

    /// A link (to a link, from another directory, relative) is followed: its final target is
    /// replaced, the links stay links. A dangling link's target is created.
    #[cfg(unix)]
    #[test]
    fn a_symlink_is_followed_and_kept() {
        use std::os::unix::fs::symlink;
        let d = dir("link");
        let sub = d.join("sub");
        fs::create_dir_all(&sub).unwrap();
        let real = d.join("real.json");
        fs::write(&real, "old").unwrap();
        symlink("real.json", d.join("link.json")).unwrap();
        let chain = sub.join("chain.json");
        symlink("../link.json", &chain).unwrap();
        write(&chain, "writing test", |w| w.write_all(b"new")).unwrap();
        for link in [&chain, &d.join("link.json")] {
            let meta = fs::symlink_metadata(link).unwrap();
            assert!(
                meta.file_type().is_symlink(),
                "{} was replaced",
                link.display()
            );
        }
        assert_eq!(fs::read_to_string(&real).unwrap(), "new");
        assert!(fs::symlink_metadata(&real).unwrap().is_file());
        assert_eq!(temporaries(&d), Vec::<PathBuf>::new());
        assert_eq!(temporaries(&sub), Vec::<PathBuf>::new());

        let dangling = d.join("dangling.json");
        symlink("made.json", &dangling).unwrap();
        write(&dangling, "writing test", |w| w.write_all(b"made")).unwrap();
        assert!(fs::symlink_metadata(&dangling)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_to_string(d.join("made.json")).unwrap(), "made");
        fs::remove_dir_all(&d).unwrap();
    }

    /// A fifo is written in place (its reader gets the bytes), not replaced by a file.
    #[cfg(unix)]
    #[test]
    fn a_fifo_is_written_in_place() {
        use std::os::unix::fs::FileTypeExt;
        let d = dir("fifo");
        fs::create_dir_all(&d).unwrap();
        let fifo = d.join("out.fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipped: mkfifo failed");
            fs::remove_dir_all(&d).unwrap();
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let reading = fifo.clone();
        // Never joined: if the fifo were replaced, this reader would wait for a writer forever.
        std::thread::spawn(move || {
            let _ = tx.send(fs::read_to_string(reading));
        });
        write(&fifo, "writing test", |w| w.write_all(b"through the fifo")).unwrap();
        let kind = fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(kind.is_fifo(), "the fifo was replaced: {kind:?}");
        let read = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the reader finished")
            .unwrap();
        assert_eq!(read, "through the fifo");
        assert_eq!(temporaries(&d), Vec::<PathBuf>::new());
        fs::remove_dir_all(&d).unwrap();
    }

    /// A character device (a `/dev/null` made in a temporary directory; skipped where it
    /// cannot be made or opened), and a link to it: written in place, neither replaced.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_device_is_written_in_place() {
        use std::os::unix::fs::{symlink, FileTypeExt};
        let d = dir("dev");
        fs::create_dir_all(&d).unwrap();
        let null = d.join("null");
        let made = std::process::Command::new("mknod")
            .arg(&null)
            .args(["c", "1", "3"])
            .stderr(std::process::Stdio::null())
            .status();
        if !made.is_ok_and(|s| s.success()) || File::options().write(true).open(&null).is_err() {
            eprintln!("skipped: no device can be made and opened here (not root, or nodev)");
            fs::remove_dir_all(&d).unwrap();
            return;
        }
        let link = d.join("link");
        symlink(&null, &link).unwrap();
        for path in [&null, &link] {
            write(path, "writing test", |w| w.write_all(b"gone")).unwrap();
            let meta = fs::metadata(&null).unwrap();
            assert!(
                meta.file_type().is_char_device(),
                "writing {} replaced the device",
                path.display()
            );
        }
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(temporaries(&d), Vec::<PathBuf>::new());
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
