//! `--record`: both directions of a connection, chunk by chunk, one file per connection.
//!
//! The file `BASE.n` starts with the 8 bytes [`MAGIC`], then holds one chunk per delivery, in
//! the order the bytes reached their destination: a [`CHUNK_HEADER`]-byte header, then the
//! bytes. The header is little-endian: the direction (`>` client → upstream, `<` upstream →
//! client, one byte), three zero bytes, the length (`u32`), the connection number (`u64`, `n`
//! of the file name), and the time of the delivery (`u64` nanoseconds since the Unix epoch,
//! `CLOCK_REALTIME`). A chunk of length 0 marks the end of its direction: the source's end of
//! file passed on as a half-close. A direction cut by a reset has no such chunk.
//!
//! A recorded direction's pipe is only ever filled when empty, so right after a fill it holds
//! exactly the new bytes. `tee` duplicates them into the recorder's own pipe, which therefore
//! mirrors the relay's pipe byte for byte. Each time `k` bytes leave the relay's pipe for their
//! destination, a header and the first `k` bytes of the mirror are spliced into the file: the
//! file holds exactly what each side's socket accepted, even when a side goes away mid-stream.
//!
//! `tee` copies whole pipe buffers and stops when the target pipe has no free slot, so the
//! mirror must have at least as many slots as the relay's pipe: both are sized alike (the
//! relay's pipe is shrunk to the mirror's when the kernel gave the mirror less, as it does
//! once the per-user pipe budget runs out). See tee(2), splice(2).

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::pipe::{fcntl_getpipe_size, fcntl_setpipe_size, splice, tee, PipeFlags, SpliceFlags};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The first bytes of every recording: the format and its version.
pub const MAGIC: &[u8; 8] = b"FDKREC1\n";
/// Bytes in a chunk header: direction, 3 zero bytes, length, connection, time.
pub const CHUNK_HEADER: usize = 24;
/// The direction byte of client → upstream chunks.
pub const CLIENT_TO_UPSTREAM: u8 = b'>';
/// The direction byte of upstream → client chunks.
pub const UPSTREAM_TO_CLIENT: u8 = b'<';

/// One connection's recording file, shared by its two directions.
pub(super) struct RecordFile {
    file: OwnedFd,
    conn: u64,
}

/// The mirror pipe recording one direction into its connection's file.
pub(super) struct Recorder {
    mirror_r: OwnedFd,
    mirror_w: OwnedFd,
    file: Rc<RecordFile>,
    direction: u8,
}

/// `base.n`: the recording of connection `n`.
pub(super) fn recording_path(base: &Path, n: u64) -> PathBuf {
    let mut name = OsString::from(base.as_os_str());
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// `write(2)` of all of `bytes` to a regular file (a short write is followed by another,
/// which reports the error, such as `EFBIG` past `RLIMIT_FSIZE`).
fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> Result<(), Errno> {
    while !bytes.is_empty() {
        match rustix::io::write(fd, bytes) {
            Ok(0) => return Err(Errno::IO),
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl RecordFile {
    /// Creates (truncating) `base.n` with mode 0644 (less the umask) and writes [`MAGIC`].
    /// See open(2).
    pub fn create(base: &Path, n: u64) -> Result<Rc<Self>, Errno> {
        let file = rustix::fs::open(
            recording_path(base, n).as_path(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )?;
        write_all(&file, MAGIC)?;
        Ok(Rc::new(RecordFile { file, conn: n }))
    }

    /// Writes the header of a chunk of `len` bytes going `direction`, timed now.
    fn header(&self, direction: u8, len: usize) -> Result<(), Errno> {
        let len = u32::try_from(len).map_err(|_| Errno::FBIG)?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let mut header = [0u8; CHUNK_HEADER];
        header[0] = direction;
        header[4..8].copy_from_slice(&len.to_le_bytes());
        header[8..16].copy_from_slice(&self.conn.to_le_bytes());
        header[16..24].copy_from_slice(&nanos.to_le_bytes());
        write_all(&self.file, &header)
    }
}

impl Recorder {
    /// A mirror pipe for the relay pipe whose write end is `relay_w`, recording into `file`
    /// as `direction` ([`CLIENT_TO_UPSTREAM`] or [`UPSTREAM_TO_CLIENT`]).
    pub fn create(file: &Rc<RecordFile>, direction: u8, relay_w: &OwnedFd) -> Result<Self, Errno> {
        let (mirror_r, mirror_w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?;
        let relay_size = fcntl_getpipe_size(relay_w)?;
        if fcntl_getpipe_size(&mirror_w)? < relay_size
            && fcntl_setpipe_size(&mirror_w, relay_size).is_err()
        {
            // The mirror cannot grow (pipe budget): shrink the relay's empty pipe to match.
            let mirror_size = fcntl_getpipe_size(&mirror_w)?;
            fcntl_setpipe_size(relay_w, mirror_size)?;
        }
        Ok(Recorder {
            mirror_r,
            mirror_w,
            file: Rc::clone(file),
            direction,
        })
    }

    /// Duplicates the `n` bytes the relay's (otherwise empty) pipe just received.
    pub fn tee(&mut self, relay_r: &OwnedFd, n: usize) -> Result<(), Errno> {
        loop {
            match tee(relay_r, &self.mirror_w, n, SpliceFlags::NONBLOCK) {
                Ok(m) if m == n => return Ok(()),
                // The mirror had no room for all of it: the pipes are sized so that this
                // cannot happen, and a partial copy cannot be resumed (tee always starts at
                // the head of the pipe), so the recording would be wrong.
                Ok(_) | Err(Errno::AGAIN) => return Err(Errno::NOSPC),
                Err(Errno::INTR) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes a chunk: the header, then the first `k` bytes of the mirror (those the
    /// destination just accepted).
    pub fn commit(&mut self, k: usize) -> Result<(), Errno> {
        self.file.header(self.direction, k)?;
        let mut left = k;
        while left > 0 {
            match splice(
                &self.mirror_r,
                None,
                &self.file.file,
                None,
                left,
                SpliceFlags::MOVE,
            ) {
                Ok(0) => return Err(Errno::IO),
                Ok(m) => left -= m,
                Err(Errno::INTR) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes the chunk of length 0 that marks this direction's end (its half-close).
    pub fn end(&mut self) -> Result<(), Errno> {
        self.file.header(self.direction, 0)
    }
}
