//! Opening files beneath the root, and the open-file cache.
//!
//! Every file is opened relative to the root directory's fd with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS)`: the kernel refuses any resolution that leaves the root (`..`,
//! absolute symlinks, symlinks pointing outside), so what the request parser let through can
//! still never reach outside. Where `openat2` is missing (`ENOSYS`, before Linux 5.6) the file
//! is opened with `openat` and its real path (`/proc/self/fd/N`) must lie under the root's.
//!
//! Open files are cached by request path (like nginx's `open_file_cache`): an entry's fd is
//! `fstat`ed once per loop iteration in which it is used (size and mtime must not have
//! changed: h2o's file cache likewise lives one iteration), and every [`VALID`] one `statat`
//! of its path (the same inode must still be there); a change reopens it.
//!
//! Every cached file holds an fd, so the cache has a budget: what `RLIMIT_NOFILE` leaves after
//! the connections and a reserve (see `mod.rs`), at most [`CACHE_MAX`]. It counts the cached
//! files and those a response still sends after they left the cache (their fds stay open until
//! it ends); a new file that would exceed it evicts the least recently used idle entries. An
//! `open` that fails with `EMFILE`/`ENFILE` all the same closes idle entries and is tried once
//! more before the request gets 503; the engines ask for fds back the same way
//! ([`FileCache::shed`]) when `accept` fails for want of them. See getrlimit(2), open(2).
//!
//! Files up to [`MAP_MAX`] bytes are also mapped (`mmap`, read-only,
//! shared) so their bodies go out in the same `sendmsg` as the head: the kernel copies them
//! from the page cache into the socket; this process never reads the mapping (so a file
//! truncated meanwhile makes the send fail with `EFAULT`, never a `SIGBUS` here). Larger
//! files go out with `sendfile(2)`.

use super::lru::Lru;
use crate::http::{
    content_type, escape_html, format_http_date, percent_encode, resolve_target, ETag, Status,
};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
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
/// The most cached entries, whatever the fd budget allows.
pub(super) const CACHE_MAX: usize = 4096;

/// The fewest idle entries closed when fds run out.
const SHED_MIN: usize = 16;
/// The files that stand for a directory, tried in order (http.server's pair).
const INDEX_NAMES: [&[u8]; 2] = [b"index.html", b"index.htm"];

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
        self.open_beneath_with(
            rel,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        )
    }

    /// `fstat` of what `rel` names beneath the root, symlinks followed only while they stay
    /// beneath it (the rule files are opened by). `O_PATH`: nothing is opened for reading,
    /// no device or FIFO is touched. See openat2(2), fstat(2).
    fn stat_beneath(&self, rel: &[u8]) -> Result<rustix::fs::Stat, Errno> {
        let fd = self.open_beneath_with(rel, OFlags::PATH | OFlags::CLOEXEC)?;
        rustix::fs::fstat(&fd)
    }

    fn open_beneath_with(&self, rel: &[u8], flags: OFlags) -> Result<OwnedFd, Errno> {
        let path = if rel.is_empty() { &b"."[..] } else { rel };
        let path = OsStr::from_bytes(path);
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
    /// A directory without an index file, with listings on: this HTML page lists it.
    Listing(Vec<u8>),
    /// A directory without an index file, with listings off (404, saying so).
    NoIndex,
}

/// A refusal, with the target's raw path and query (for a redirect's `Location`).
pub(super) type Refused<'t> = (Refusal, &'t [u8], &'t [u8]);

struct Cached {
    entry: Rc<FileEntry>,
    /// When its path was last checked (`statat`).
    checked: Instant,
    /// The loop iteration (its `now`) whose `fstat` last found the file unchanged.
    seen: Instant,
}

/// The cached entries and the fds they hold, within a budget.
struct Entries {
    map: Lru<Box<[u8]>, Cached>,
    /// Entries no longer cached that a response still holds: their fds are open until it
    /// drops them, so they count against the budget.
    held: Vec<Rc<FileEntry>>,
    /// The most fds the cached and held entries may have open.
    budget: usize,
}

impl Entries {
    /// The fds the cache accounts for.
    fn fds(&self) -> usize {
        self.map.len() + self.held.len()
    }

    /// Forgets the held entries no response holds any more (closing their fds); returns how
    /// many.
    fn release_held(&mut self) -> usize {
        let before = self.held.len();
        self.held.retain(|e| Rc::strong_count(e) > 1);
        before - self.held.len()
    }

    /// Keeps an entry that left the cache counted while a response still holds it.
    fn retire(&mut self, entry: Rc<FileEntry>) {
        if Rc::strong_count(&entry) > 1 {
            self.held.push(entry);
        }
    }

    /// Evicts the least recently used idle entries (closing their fds) until one more file
    /// fits the budget, or no idle entry is left. Entries a response is sending stay: evicting
    /// one would close nothing (its fd stays open until the response ends) and the next
    /// request for it would open it again.
    fn make_room(&mut self) {
        if self.fds() < self.budget {
            return;
        }
        self.release_held();
        let over = (self.fds() + 1).saturating_sub(self.budget);
        self.map
            .evict_where(over, |c| Rc::strong_count(&c.entry) == 1, drop);
    }

    /// Closes up to `max` idle cached files (least recently used first) and the held ones no
    /// longer in use; returns how many fds that freed.
    fn shed(&mut self, max: usize) -> usize {
        let freed = self.release_held();
        freed
            + self
                .map
                .evict_where(max, |c| Rc::strong_count(&c.entry) == 1, drop)
    }
}

/// The open-file cache of one engine (single-threaded).
pub(super) struct FileCache {
    root: Root,
    /// A directory without an index file gets a listing (else 404).
    listing: bool,
    entries: Entries,
    key: Vec<u8>,
    scratch: Vec<u8>,
}

impl FileCache {
    /// A cache that keeps at most `budget` fds open (capped at [`CACHE_MAX`]; 0 caches
    /// nothing: each file is opened per request and closed when its response ends).
    /// `listing`: a directory without an index file is answered with a listing.
    pub fn new(root: Root, budget: usize, listing: bool) -> FileCache {
        FileCache {
            root,
            listing,
            entries: Entries {
                map: Lru::new(),
                held: Vec::new(),
                budget: budget.min(CACHE_MAX),
            },
            key: Vec::with_capacity(256),
            scratch: Vec::with_capacity(256),
        }
    }

    /// Closes idle cached files, least recently used first, to give their fds back (the
    /// engines call it when `accept` fails with `EMFILE`/`ENFILE`); returns how many fds that
    /// freed (0: none were idle).
    pub fn shed(&mut self) -> usize {
        let max = (self.entries.map.len() / 4).max(SHED_MIN);
        self.entries.shed(max)
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
        if let Some(c) = self.entries.map.get_mut(&self.key[..]) {
            // One fstat of the cached fd per loop iteration that uses it: a file rewritten in
            // place (truncated, grown, touched) must never be answered with a stale length,
            // which the body could not keep. The requests of one iteration are answered from
            // the file as its first use in that iteration (`now`) found it, as if they had
            // arrived together; the next iteration looks again. A different file under the name
            // (renamed over) is seen by the path check at most VALID later; until then the
            // old file is served whole.
            let unchanged = c.seen == now
                || rustix::fs::fstat(&c.entry.fd).is_ok_and(|st| ident(&st) == c.entry.ident);
            if unchanged {
                c.seen = now;
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
            if let Some(stale) = self.entries.map.remove(&self.key[..]) {
                self.entries.retire(stale.entry);
            }
        }
        if t.trailing_slash {
            self.key.pop();
        }
        match self.open(t.trailing_slash) {
            Ok(entry) => {
                let entry = Rc::new(entry);
                if t.trailing_slash {
                    self.key.push(b'/');
                }
                // Counted either way: cached, or held while its response is sent when
                // responses hold the whole budget (or it is 0). Room is made only now, so
                // that requests for missing files never evict anything; the file opened
                // meanwhile is within the reserve the budget leaves.
                self.entries.make_room();
                if self.entries.fds() < self.entries.budget {
                    self.entries.map.insert(
                        self.key.clone().into_boxed_slice(),
                        Cached {
                            entry: entry.clone(),
                            checked: now,
                            seen: now,
                        },
                    );
                } else {
                    self.entries.held.push(entry.clone());
                }
                Ok(entry)
            }
            Err(r) => Err((r, t.raw_path, t.query)),
        }
    }

    /// Opens `self.key` (a directory's `index.html`, else its `index.htm`, when it is one).
    fn open(&mut self, trailing_slash: bool) -> Result<FileEntry, Refusal> {
        let fd = open_or_shed(&self.root, &mut self.entries, &self.key).map_err(refusal)?;
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
            let dir_len = self.scratch.len();
            let mut found = None;
            for name in INDEX_NAMES {
                self.scratch.truncate(dir_len);
                self.scratch.extend_from_slice(name);
                match open_or_shed(&self.root, &mut self.entries, &self.scratch) {
                    Ok(index) => {
                        found = Some(index);
                        break;
                    }
                    Err(Errno::NOENT) => {}
                    Err(e) => return Err(refusal(e)),
                }
            }
            let Some(index) = found else {
                if !self.listing {
                    return Err(Refusal::NoIndex);
                }
                let page = listing(&self.root, fd, &self.key).map_err(refusal)?;
                return Err(Refusal::Listing(page));
            };
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

/// Opens `rel` beneath the root; when the process is out of fds (`EMFILE`, or the system:
/// `ENFILE`), closes idle cached files and tries once more. See open(2).
fn open_or_shed(root: &Root, entries: &mut Entries, rel: &[u8]) -> Result<OwnedFd, Errno> {
    match root.open_beneath(rel) {
        Err(e @ (Errno::MFILE | Errno::NFILE)) => {
            let max = (entries.map.len() / 4).max(SHED_MIN);
            if entries.shed(max) == 0 {
                return Err(e);
            }
            root.open_beneath(rel)
        }
        other => other,
    }
}

/// The HTML page that lists directory `dir` (`rel` beneath the root, decoded, no slashes
/// around it), as `python -m http.server` lists one: names sorted without regard to case,
/// directories with a trailing `/`, each name HTML-escaped and its link percent-encoded (one
/// relative path segment: no name can turn into markup, a scheme or another path).
///
/// The directory was opened beneath the root (openat2 `RESOLVE_BENEATH`), so it is the root
/// or below it. An entry that is a symlink is resolved by the same rule: one that leads out
/// of the root (or nowhere) is left out, never followed. See getdents64(2), openat2(2).
fn listing(root: &Root, dir: OwnedFd, rel: &[u8]) -> Result<Vec<u8>, Errno> {
    let mut names: Vec<(Vec<u8>, bool)> = Vec::new();
    let mut path = Vec::with_capacity(rel.len() + 64);
    for entry in rustix::fs::Dir::new(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            FileType::Symlink | FileType::Unknown => {
                path.clear();
                path.extend_from_slice(rel);
                if !rel.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(name);
                match root.stat_beneath(&path) {
                    Ok(st) => FileType::from_raw_mode(st.st_mode) == FileType::Directory,
                    Err(_) => continue,
                }
            }
            _ => false,
        };
        names.push((name.to_vec(), is_dir));
    }
    names.sort_by(|(a, _), (b, _)| {
        a.to_ascii_lowercase()
            .cmp(&b.to_ascii_lowercase())
            .then_with(|| a.cmp(b))
    });
    let mut title = Vec::with_capacity(rel.len() + 2);
    title.push(b'/');
    title.extend_from_slice(rel);
    if !rel.is_empty() {
        title.push(b'/');
    }
    let mut page = Vec::with_capacity(256 + names.len() * 64);
    page.extend_from_slice(
        b"<!DOCTYPE HTML>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Directory listing for ",
    );
    escape_html(&title, &mut page);
    page.extend_from_slice(b"</title>\n</head>\n<body>\n<h1>Directory listing for ");
    escape_html(&title, &mut page);
    page.extend_from_slice(b"</h1>\n<hr>\n<ul>\n");
    for (name, is_dir) in &names {
        page.extend_from_slice(b"<li><a href=\"");
        percent_encode(name, &mut page);
        if *is_dir {
            page.push(b'/');
        }
        page.extend_from_slice(b"\">");
        escape_html(name, &mut page);
        if *is_dir {
            page.push(b'/');
        }
        page.extend_from_slice(b"</a></li>\n");
    }
    page.extend_from_slice(b"</ul>\n<hr>\n</body>\n</html>\n");
    Ok(page)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory with `n` small files `f0` … and one larger than [`MAP_MAX`] (`big`).
    fn site(name: &str, n: usize) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fdkit-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..n {
            std::fs::write(dir.join(format!("f{i}")), format!("file {i}\n")).unwrap();
        }
        std::fs::write(dir.join("big"), vec![7u8; MAP_MAX as usize + 1]).unwrap();
        dir
    }

    fn cache(dir: &Path, budget: usize) -> FileCache {
        FileCache::new(Root::open(dir).unwrap(), budget, false)
    }

    fn get(c: &mut FileCache, name: &str) -> Rc<FileEntry> {
        let target = format!("/{name}");
        match c.lookup(target.as_bytes(), Instant::now()) {
            Ok(e) => e,
            Err(_) => panic!("lookup of {target} refused"),
        }
    }

    fn cached(c: &FileCache, name: &str) -> bool {
        c.entries.map.index_has(name.as_bytes())
    }

    #[test]
    fn many_distinct_files_stay_within_the_budget() {
        let dir = site("budget", 100);
        let mut c = cache(&dir, 10);
        for round in 0..3 {
            for i in 0..100 {
                let e = get(&mut c, &format!("f{i}"));
                assert_eq!(e.size, format!("file {i}\n").len() as u64, "round {round}");
                drop(e);
                assert!(c.entries.fds() <= 10, "{} fds", c.entries.fds());
            }
        }
        assert_eq!(c.entries.map.len(), 10);
        assert!(c.entries.held.is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_least_recently_used_file_goes_first() {
        let dir = site("lru", 5);
        let mut c = cache(&dir, 3);
        let a = get(&mut c, "f0");
        get(&mut c, "f1");
        get(&mut c, "f2");
        drop(a);
        let a = get(&mut c, "f0"); // a hit: f0 is now the most recent, f1 the least
        get(&mut c, "f3");
        assert!(!cached(&c, "f1"), "the least recently used is evicted");
        assert!(cached(&c, "f0") && cached(&c, "f2") && cached(&c, "f3"));
        assert!(
            Rc::ptr_eq(&a, &get(&mut c, "f0")),
            "a cached entry is served again"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn files_held_by_responses_count_and_idle_ones_go_first() {
        let dir = site("held", 6);
        let mut c = cache(&dir, 3);
        let a = get(&mut c, "f0"); // held by "a response" throughout
        get(&mut c, "f1");
        get(&mut c, "f2");
        get(&mut c, "f3");
        // f0 is the least recently used but in use: the idle f1 went instead.
        assert!(cached(&c, "f0") && !cached(&c, "f1"));
        let b = get(&mut c, "f2");
        let d = get(&mut c, "f3");
        // All three cached files are in use: a new one is served but not cached; it is
        // held, its fd counted until its response drops it.
        let e = get(&mut c, "f4");
        let f = get(&mut c, "f5");
        assert!(cached(&c, "f0") && cached(&c, "f2") && cached(&c, "f3"));
        assert_eq!(c.entries.held.len(), 2);
        assert!(Rc::ptr_eq(&c.entries.held[0], &e) && Rc::ptr_eq(&c.entries.held[1], &f));
        assert_eq!(c.entries.fds(), 5);
        // Responses end: the held fds close at the next miss, and the cache is back to budget.
        drop((a, b, d, e, f));
        get(&mut c, "f1");
        assert!(c.entries.held.is_empty());
        assert_eq!(c.entries.fds(), 3);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_budget_of_zero_caches_nothing() {
        let dir = site("zero", 2);
        let mut c = cache(&dir, 0);
        let a = get(&mut c, "f0");
        let b = get(&mut c, "f0");
        assert!(!Rc::ptr_eq(&a, &b), "every request opens the file");
        assert_eq!(c.entries.map.len(), 0);
        drop((a, b));
        let big = get(&mut c, "big");
        assert!(big.map.is_none() && big.size == MAP_MAX + 1);
        assert_eq!(c.entries.held.len(), 1, "only the file in use is open");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn shed_closes_idle_files_only() {
        let dir = site("shed", 40);
        let mut c = cache(&dir, 100);
        let keep = get(&mut c, "f0");
        for i in 1..40 {
            get(&mut c, &format!("f{i}"));
        }
        assert_eq!(c.entries.map.len(), 40);
        // At least SHED_MIN, oldest first, never the one in use.
        assert_eq!(c.shed(), SHED_MIN);
        assert!(cached(&c, "f0") && !cached(&c, "f1") && cached(&c, "f39"));
        while c.shed() > 0 {}
        assert_eq!(c.entries.map.len(), 1);
        assert!(Rc::ptr_eq(&keep, &get(&mut c, "f0")));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_budget_never_exceeds_cache_max() {
        let dir = site("max", 0);
        let c = cache(&dir, usize::MAX);
        assert_eq!(c.entries.budget, CACHE_MAX);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
