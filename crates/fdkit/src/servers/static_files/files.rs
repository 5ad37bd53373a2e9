//! Opening files beneath the root, and the open-file cache.
//!
//! Every file is opened relative to the root directory's fd with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS)`: the kernel refuses any resolution that leaves the root (`..`,
//! absolute symlinks, symlinks pointing outside), so what the request parser let through can
//! still never reach outside. Where `openat2` is missing (`ENOSYS`, before Linux 5.6) the file
//! is opened with `openat` and its real path (`/proc/self/fd/N`) must lie under the root's.
//!
//! Open files are cached by request path (like nginx's `open_file_cache`): each use of an
//! entry costs one `fstat` of its fd (size and mtime must not have changed), and every
//! [`VALID`] one `statat` of its path (the same inode must still be there); a change reopens it. Files up to [`MAP_MAX`] bytes are also mapped (`mmap`, read-only,
//! shared) so their bodies go out in the same `sendmsg` as the head: the kernel copies them
//! from the page cache into the socket; this process never reads the mapping (so a file
//! truncated meanwhile makes the send fail with `EFAULT`, never a `SIGBUS` here). Larger
//! files go out with `sendfile(2)`.

use crate::http::{content_type, format_http_date, resolve_target, ETag, Status};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a cached entry is trusted without a `stat`.
pub(super) const VALID: Duration = Duration::from_secs(1);
/// The largest file whose body is sent from a mapping (larger: `sendfile`).
pub(super) const MAP_MAX: u64 = 64 * 1024;
/// The most cached entries (the cache is emptied when full; entries in use stay alive).
const CACHE_MAX: usize = 4096;

static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// The served directory: an `O_PATH` fd and its real path.
#[derive(Debug)]
pub(super) struct Root {
    fd: OwnedFd,
    real: PathBuf,
}

impl Root {
    /// Opens `path`, which must be a directory. See open(2) (`O_PATH`, `O_DIRECTORY`).
    pub fn open(path: &Path) -> io::Result<Root> {
        let fd = rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let real = std::fs::canonicalize(path)?;
        Ok(Root { fd, real })
    }

    /// Opens `rel` (no leading slash; empty for the root itself) beneath the root.
    /// See openat2(2).
    fn open_beneath(&self, rel: &[u8]) -> Result<OwnedFd, Errno> {
        let path = if rel.is_empty() { &b"."[..] } else { rel };
        let path = OsStr::from_bytes(path);
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            match rustix::fs::openat2(
                &self.fd,
                path,
                flags,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            ) {
                Err(Errno::NOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
                Err(Errno::AGAIN) => {} // a concurrent rename; the fallback checks the result
                other => return other,
            }
        }
        let fd = rustix::fs::openat(&self.fd, path, flags, Mode::empty())?;
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|_| Errno::ACCESS)?;
        if link == self.real || link.starts_with(&self.real) {
            Ok(fd)
        } else {
            Err(Errno::XDEV)
        }
    }
}

/// A read-only shared mapping, unmapped on drop. Only its address is ever used (handed to
/// the kernel in an iovec); this process never dereferences it.
pub(super) struct Mapping {
    pub ptr: *mut libc::c_void,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; nothing uses them after this
        // (the entry holding the mapping is dropped only when no send refers to it).
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// One open file and what its responses need.
pub(super) struct FileEntry {
    pub fd: OwnedFd,
    pub map: Option<Mapping>,
    pub size: u64,
    /// Modification time in whole seconds (what `Last-Modified` says).
    pub mtime: i64,
    /// `Content-Type: …\r\nLast-Modified: …\r\nAccept-Ranges: bytes\r\n`.
    pub fixed_head: Box<[u8]>,
    /// The strong entity tag (inode, size, mtime in ns), formatted once.
    pub etag: ETag,
    /// Identity for revalidation: device, inode, size, mtime (s, ns).
    ident: (u64, u64, i64, i64, i64),
    /// The opened file's path relative to the root (the index file for directories).
    file_path: Box<[u8]>,
}

impl FileEntry {
    /// The mapping's address, when the body is mapped.
    pub fn map_ptr(&self) -> Option<*const u8> {
        self.map.as_ref().map(|m| m.ptr as *const u8)
    }
}

/// Why a lookup gave no file.
pub(super) enum Refusal {
    /// A directory asked for without its trailing slash: redirect to the slash form.
    Redirect,
    /// Answer with this status.
    Status(Status),
}

/// A refusal, with the target's raw path and query (for a redirect's `Location`).
pub(super) type Refused<'t> = (Refusal, &'t [u8], &'t [u8]);

struct Cached {
    entry: Rc<FileEntry>,
    checked: Instant,
}

/// The open-file cache of one engine (single-threaded).
pub(super) struct FileCache {
    root: Root,
    map: HashMap<Box<[u8]>, Cached>,
    key: Vec<u8>,
    scratch: Vec<u8>,
}

impl FileCache {
    pub fn new(root: Root) -> FileCache {
        FileCache {
            root,
            map: HashMap::new(),
            key: Vec::with_capacity(256),
            scratch: Vec::with_capacity(256),
        }
    }

    /// Resolves the request target and returns its file, from the cache when still valid.
    /// `raw` gets the target's raw path and query (for a redirect).
    pub fn lookup<'t>(
        &mut self,
        target: &'t [u8],
        now: Instant,
    ) -> Result<Rc<FileEntry>, Refused<'t>> {
        let t = match resolve_target(target, &mut self.key) {
            Ok(t) => t,
            Err(status) => return Err((Refusal::Status(status), b"", b"")),
        };
        if t.trailing_slash {
            self.key.push(b'/');
        }
        if let Some(c) = self.map.get_mut(&self.key[..]) {
            // One fstat of the cached fd per request: a file rewritten in place (truncated,
            // grown, touched) must never be answered with a stale length, which the body
            // could not keep. A different file under the name (renamed over) is seen by the
            // path check at most VALID later; until then the old file is served whole.
            let unchanged =
                rustix::fs::fstat(&c.entry.fd).is_ok_and(|st| ident(&st) == c.entry.ident);
            if unchanged {
                if now.saturating_duration_since(c.checked) < VALID {
                    return Ok(c.entry.clone());
                }
                let path = if c.entry.file_path.is_empty() {
                    &b"."[..]
                } else {
                    &c.entry.file_path[..]
                };
                let same =
                    rustix::fs::statat(&self.root.fd, OsStr::from_bytes(path), AtFlags::empty())
                        .is_ok_and(|st| ident(&st) == c.entry.ident);
                if same {
                    c.checked = now;
                    return Ok(c.entry.clone());
                }
            }
            self.map.remove(&self.key[..]);
        }
        if t.trailing_slash {
            self.key.pop();
        }
        match self.open(t.trailing_slash) {
            Ok(entry) => {
                let entry = Rc::new(entry);
                if self.map.len() >= CACHE_MAX {
                    self.map.clear();
                }
                if t.trailing_slash {
                    self.key.push(b'/');
                }
                self.map.insert(
                    self.key.clone().into_boxed_slice(),
                    Cached {
                        entry: entry.clone(),
                        checked: now,
                    },
                );
                Ok(entry)
            }
            Err(r) => Err((r, t.raw_path, t.query)),
        }
    }

    /// Opens `self.key` (a directory's `index.html` when it is one).
    fn open(&mut self, trailing_slash: bool) -> Result<FileEntry, Refusal> {
        let fd = self.root.open_beneath(&self.key).map_err(refusal)?;
        let mut st = rustix::fs::fstat(&fd).map_err(refusal)?;
        self.scratch.clear();
        self.scratch.extend_from_slice(&self.key);
        let fd = if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            if !trailing_slash {
                return Err(Refusal::Redirect);
            }
            if !self.scratch.is_empty() {
                self.scratch.push(b'/');
            }
            self.scratch.extend_from_slice(b"index.html");
            let index = self.root.open_beneath(&self.scratch).map_err(refusal)?;
            st = rustix::fs::fstat(&index).map_err(refusal)?;
            index
        } else if trailing_slash {
            // `/file/`: a file is not a directory (openat would say ENOTDIR).
            return Err(Refusal::Status(Status::NotFound));
        } else {
            fd
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => return Err(Refusal::Status(Status::NotFound)),
            _ => return Err(Refusal::Status(Status::Forbidden)),
        }
        let size = st.st_size as u64;
        let map = if size > 0 && size <= MAP_MAX {
            map_file(fd.as_fd(), size as usize)
        } else {
            None
        };
        let mut fixed = Vec::with_capacity(128);
        fixed.extend_from_slice(b"Content-Type: ");
        fixed.extend_from_slice(content_type(&self.scratch).as_bytes());
        fixed.extend_from_slice(b"\r\nLast-Modified: ");
        fixed.extend_from_slice(&format_http_date(st.st_mtime.max(0) as u64));
        fixed.extend_from_slice(b"\r\nAccept-Ranges: bytes\r\n");
        Ok(FileEntry {
            fd,
            map,
            size,
            mtime: st.st_mtime as i64,
            fixed_head: fixed.into_boxed_slice(),
            etag: ETag::new(st.st_ino, size, st.st_mtime, st.st_mtime_nsec as i64),
            ident: ident(&st),
            file_path: self.scratch.clone().into_boxed_slice(),
        })
    }
}

fn ident(st: &rustix::fs::Stat) -> (u64, u64, i64, i64, i64) {
    (
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime,
        st.st_mtime_nsec as i64,
    )
}

/// `mmap(PROT_READ, MAP_SHARED)` of the whole file; `None` when the kernel refuses.
fn map_file(fd: BorrowedFd<'_>, len: usize) -> Option<Mapping> {
    // SAFETY: a fresh mapping at an address the kernel picks (no existing memory is
    // replaced); the fd is valid for the call; the result is checked against MAP_FAILED.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        None
    } else {
        Some(Mapping { ptr, len })
    }
}

fn refusal(e: Errno) -> Refusal {
    Refusal::Status(match e {
        Errno::NOENT | Errno::NOTDIR | Errno::NAMETOOLONG => Status::NotFound,
        Errno::XDEV | Errno::LOOP | Errno::ACCESS | Errno::PERM => Status::Forbidden,
        Errno::MFILE | Errno::NFILE | Errno::NOMEM => Status::ServiceUnavailable,
        _ => Status::InternalServerError,
    })
}
