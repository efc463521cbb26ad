//! The files and directories a run makes for itself, and how none of them outlives it
//! half-made: an output written under a hidden name beside its target and renamed into
//! place only once complete and on disk ([`AtomicFile`]), and the run's temporary names
//! (an unfinished output, a spill directory) removed when it ends, when it stops on an
//! error, on SIGINT, SIGTERM and SIGHUP ([`create_tracked`]), and by a later run when it
//! was killed outright ([`remove_abandoned`]).
//!
//! Whose a name is: each holds its owner's process ID, and the owner holds an exclusive
//! lock (`flock`) on it while it lives. The kernel drops the lock when the process ends,
//! however it ends, so a name whose lock is free and whose process is gone was left by a
//! killed run. Both are asked: the lock alone would take a name made this instant, before
//! its owner locked it, for an abandoned one; the process ID alone is wrong where another
//! PID namespace (a container) shares the directory, or once the ID is reused.

use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

use anyhow::{Context, Result};

/// The names this process made and has not removed, each a file or a directory: what the
/// signal handler removes before the process ends.
static LIVE: Mutex<Vec<(PathBuf, Kind)>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

/// What a tracked name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
}

/// Makes `path` with `create` and tracks it: from then on the signal handler removes it.
/// Created and listed under one lock, so that an interruption between the two cannot leave
/// it behind unlisted (the handler takes the same lock).
pub fn create_tracked<T>(
    path: &Path,
    kind: Kind,
    create: impl FnOnce(&Path) -> std::io::Result<T>,
) -> std::io::Result<T> {
    HANDLER.call_once(install_cleanup_on_signal);
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    let made = create(path)?;
    live.push((path.to_path_buf(), kind));
    Ok(made)
}

/// Stops tracking `path` (removed, or renamed into place).
pub fn untrack(path: &Path) {
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|(p, _)| p != path);
}

/// Takes the owner's lock on an open file or directory: held until every handle on what
/// `file` opened is closed, that is, at the latest until the process ends. False when
/// another process holds it (or the system has no such locks).
pub fn lock(file: &File) -> bool {
    file.try_lock().is_ok()
}

/// Whether the process `pid` is alive (or may be: one we may not signal is alive).
fn process_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // SAFETY: signal 0 checks that the process exists and sends nothing.
        if unsafe { libc::kill(pid, 0) } == 0 {
            return true;
        }
        std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true // unknown: never taken for abandoned
    }
}

/// Whether `path`, named for the process `pid`, was left by a run that no longer lives:
/// the process is gone and nobody holds the lock on it.
fn abandoned(path: &Path, pid: u32) -> bool {
    if pid == std::process::id() || process_alive(pid) {
        return false;
    }
    File::open(path).is_ok_and(|f| lock(&f))
}

/// What [`remove_abandoned`] removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub names: u64,
    pub bytes: u64,
}

impl Removed {
    /// Says on stderr what was removed (`what`: the singular and the plural), if anything:
    /// `removed 2 spill directories (1.2 MiB) in '/tmp' left by runs that were killed`.
    pub fn say(self, what: (&str, &str), place: &str) {
        if self.names == 0 {
            return;
        }
        eprintln!(
            "attempt-funnel: removed {} ({}) {place} left by {}",
            crate::words::counted(self.names, what.0, what.1),
            crate::words::bytes(self.bytes),
            crate::words::noun(self.names, "a run that was killed", "runs that were killed"),
        );
    }
}

/// Removes the entries of `dir` that `owner` says are a run's (by the process ID it reads
/// from the name) and that their run left behind when it was killed. Unreadable entries
/// and ones that cannot be removed are left as they are: this is tidying, never an error.
pub fn remove_abandoned(dir: &Path, owner: impl Fn(&str) -> Option<u32>) -> Removed {
    let mut removed = Removed::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return removed;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(&owner) else {
            continue;
        };
        let path = entry.path();
        if !abandoned(&path, pid) {
            continue;
        }
        let bytes = size_of_tree(&path);
        let gone = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(e) => Err(e),
        };
        if gone.is_ok() {
            removed.names += 1;
            removed.bytes += bytes;
        }
    }
    removed
}

/// The bytes of the files under `path` (links not followed).
fn size_of_tree(path: &Path) -> u64 {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::read_dir(path).map_or(0, |entries| {
            entries.flatten().map(|e| size_of_tree(&e.path())).sum()
        }),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

/// The process ID in `NAME-PID-…`-style names: the decimal number right after `prefix`,
/// ended by `-` or `.`.
pub fn pid_after(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    let end = rest.find(['-', '.']).unwrap_or(rest.len());
    rest[..end].parse().ok().filter(|&pid| pid > 0)
}

/// Removes a directory that the run's threads may still be writing into: each write opens
/// its file by path, creating it again if it was removed, so the directory is first
/// renamed aside (a file opened by its old path after that fails instead), then removed,
/// again while a write that was already on its way left a file in it.
pub fn remove_while_written(path: &Path) {
    let aside = path.with_extension("removing");
    let target = if std::fs::rename(path, &aside).is_ok() {
        aside
    } else {
        path.to_path_buf()
    };
    for _ in 0..100 {
        if std::fs::remove_dir_all(&target).is_ok() || !target.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// On SIGINT, SIGTERM or SIGHUP: removes the live names (an unfinished output, so that the
/// file at its path stays as it was; the spill directories), then ends the process as the
/// signal would have (exit status 128 + the signal's number), saying so.
fn install_cleanup_on_signal() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return; // no handler: the names are still removed on a normal end and on errors
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            // Held to the end: a file being renamed into place is either renamed before
            // this (complete) or never.
            let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
            let outputs = live.iter().filter(|(_, k)| *k == Kind::File).count();
            for (path, kind) in live.iter() {
                match kind {
                    Kind::File => {
                        let _ = std::fs::remove_file(path);
                    }
                    Kind::Dir => remove_while_written(path),
                }
            }
            let name = match signal {
                SIGINT => "SIGINT",
                SIGTERM => "SIGTERM",
                _ => "SIGHUP",
            };
            let left = if outputs > 0 {
                ": nothing was written, an earlier file at the output's path is as it was"
            } else {
                ""
            };
            eprintln!("attempt-funnel: stopped by {name}{left}");
            std::process::exit(128 + signal);
        }
    });
}

/// A file written whole or not at all. Its bytes go to a hidden file beside the target,
/// `.NAME.attempt-funnel-PID-N.tmp`, which [`AtomicFile::commit`] flushes to disk and
/// renames over the target: a reader of the target sees the earlier file or the new one,
/// never a part, and of two runs writing one path the last rename wins whole. Dropped
/// without a commit (an error, a panic), the hidden file is removed; on a signal the
/// handler removes it; after `kill -9` the next run writing beside it does.
///
/// A target that exists and is no regular file (`/dev/null`, `/dev/stdout`, a pipe) is
/// written in place: it cannot be replaced, and is not the run's to replace. A symbolic
/// link to a file is followed: the file it names is replaced, the link stays.
#[derive(Debug)]
pub struct AtomicFile {
    /// The open file the bytes go to (and, for a hidden one, the lock on it).
    file: File,
    /// The hidden file and the path it is renamed to; `None` when written in place.
    temp: Option<(PathBuf, PathBuf)>,
    /// The target as the user named it, for messages.
    shown: PathBuf,
}

/// The name part of a hidden file after `.NAME.`.
const TEMP_TAG: &str = "attempt-funnel-";
const TEMP_SUFFIX: &str = ".tmp";

impl AtomicFile {
    /// Opens the hidden file for `target` (or `target` itself, when it is no regular
    /// file). Also removes hidden files beside it that killed runs left, saying so.
    pub fn create(target: &Path) -> Result<AtomicFile> {
        let cannot = || format!("could not create '{}'", target.display());
        match std::fs::metadata(target) {
            Ok(m) if !m.is_file() && !m.is_dir() => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(target)
                    .with_context(cannot)?;
                return Ok(AtomicFile {
                    file,
                    temp: None,
                    shown: target.to_path_buf(),
                });
            }
            _ => {}
        }
        // Replaced where it really is: a link to it stays a link.
        let real = std::fs::canonicalize(target).unwrap_or_else(|_| target.to_path_buf());
        let dir = match real.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let Some(name) = real.file_name().and_then(|n| n.to_str()) else {
            anyhow::bail!("{}: not a file name", cannot());
        };
        let prefix = format!(".{name}.{TEMP_TAG}");
        let removed = remove_abandoned(&dir, |entry| {
            entry
                .ends_with(TEMP_SUFFIX)
                .then(|| pid_after(entry, &prefix))
                .flatten()
        });
        removed.say(
            ("unfinished file", "unfinished files"),
            &format!("beside '{}'", target.display()),
        );
        let pid = std::process::id();
        for n in 0u32.. {
            let temp = dir.join(format!("{prefix}{pid}-{n}{TEMP_SUFFIX}"));
            let created = create_tracked(&temp, Kind::File, |p| {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(p)?;
                lock(&file);
                Ok(file)
            });
            match created {
                Ok(file) => {
                    // The new file keeps the old one's permissions (a report kept private
                    // stays private).
                    if let Ok(old) = std::fs::metadata(&real) {
                        let _ = file.set_permissions(old.permissions());
                    }
                    return Ok(AtomicFile {
                        file,
                        temp: Some((temp, real)),
                        shown: target.to_path_buf(),
                    });
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(anyhow::Error::new(e).context(cannot())),
            }
        }
        anyhow::bail!("{}: no free temporary name beside it", cannot())
    }

    /// A handle to write the bytes through (the same open file).
    pub fn writer(&self) -> Result<File> {
        self.file
            .try_clone()
            .context("could not open the output file again")
    }

    /// Puts the file in place, once every byte is written through [`AtomicFile::writer`]
    /// (and flushed): on disk first, then renamed over the target.
    pub fn commit(mut self) -> Result<()> {
        let Some((temp, target)) = self.temp.take() else {
            return Ok(());
        };
        let shown = &self.shown;
        let written = self
            .file
            .sync_all()
            .with_context(|| format!("could not write '{}'", shown.display()));
        let renamed = written.and_then(|()| {
            // Under the signal handler's lock: renamed before it runs, or never.
            let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
            let renamed = std::fs::rename(&temp, &target)
                .with_context(|| format!("could not put '{}' in place", shown.display()));
            if renamed.is_ok() {
                live.retain(|(p, _)| p != &temp);
            }
            renamed
        });
        if renamed.is_err() {
            let _ = std::fs::remove_file(&temp);
            untrack(&temp);
            return renamed;
        }
        // The rename itself on disk (best effort: not every system opens directories).
        if let Some(dir) = target.parent().and_then(|d| File::open(d).ok()) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if let Some((temp, _)) = self.temp.take() {
            let _ = std::fs::remove_file(&temp);
            untrack(&temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::Write;

    /// A fresh directory for one test, removed at its end.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir()
                .join(format!("attempt-funnel-unit-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir(&dir).unwrap();
            Scratch(dir)
        }

        fn names(&self) -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(&self.0)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn write(file: &AtomicFile, bytes: &[u8]) {
        file.writer().unwrap().write_all(bytes).unwrap();
    }

    #[test]
    fn a_file_takes_its_name_only_when_committed_and_a_dropped_one_leaves_the_earlier() {
        let dir = Scratch::new("commit");
        let target = dir.0.join("out.txt");
        std::fs::write(&target, "earlier").unwrap();
        let file = AtomicFile::create(&target).unwrap();
        write(&file, b"new, unfinished");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "earlier");
        assert_eq!(dir.names().len(), 2, "{:?}", dir.names());
        drop(file);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "earlier");
        assert_eq!(dir.names(), ["out.txt"]);

        let file = AtomicFile::create(&target).unwrap();
        write(&file, b"new");
        file.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        assert_eq!(dir.names(), ["out.txt"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_link_to_a_file_stays_a_link_and_a_device_is_written_in_place() {
        let dir = Scratch::new("link");
        let real = dir.0.join("real.txt");
        let link = dir.0.join("link.txt");
        std::fs::write(&real, "earlier").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let file = AtomicFile::create(&link).unwrap();
        write(&file, b"new");
        file.commit().unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
        assert_eq!(dir.names(), ["link.txt", "real.txt"]);

        let null = AtomicFile::create(Path::new("/dev/null")).unwrap();
        write(&null, b"gone");
        null.commit().unwrap();
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
    }

    #[test]
    fn the_process_id_is_read_from_a_name_after_its_prefix() {
        assert_eq!(
            pid_after("attempt-funnel-123-0", "attempt-funnel-"),
            Some(123)
        );
        assert_eq!(
            pid_after("attempt-funnel-77-3.removing", "attempt-funnel-"),
            Some(77)
        );
        assert_eq!(
            pid_after(
                ".out.jsonl.attempt-funnel-9-0.tmp",
                ".out.jsonl.attempt-funnel-"
            ),
            Some(9)
        );
        assert_eq!(pid_after("attempt-funnel-x-0", "attempt-funnel-"), None);
        assert_eq!(pid_after("attempt-funnel-0-0", "attempt-funnel-"), None);
        assert_eq!(pid_after("other-12", "attempt-funnel-"), None);
    }
}
