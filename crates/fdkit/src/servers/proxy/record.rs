//! `--record`: a copy of what the client received, one file per connection.
//!
//! The recorded direction's pipe is only ever filled when empty, so right after a fill it holds
//! exactly the new bytes. `tee` duplicates them into the recorder's own pipe, which therefore
//! mirrors the relay's pipe byte for byte. Each time `k` bytes leave the relay's pipe for the
//! client, the first `k` bytes of the mirror are spliced into the file. The file thus holds
//! exactly what the client's socket accepted, even when the client goes away mid-stream.
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

/// The file and mirror pipe recording one connection.
pub(super) struct Recorder {
    mirror_r: OwnedFd,
    mirror_w: OwnedFd,
    file: OwnedFd,
}

/// `base.n`: the recording of connection `n`.
pub(super) fn recording_path(base: &Path, n: u64) -> PathBuf {
    let mut name = OsString::from(base.as_os_str());
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

impl Recorder {
    /// Creates (truncating) `base.n` with mode 0644 (less the umask) and a mirror pipe for the
    /// relay pipe whose write end is `relay_w`. See open(2).
    pub fn create(base: &Path, n: u64, relay_w: &OwnedFd) -> Result<Self, Errno> {
        let (mirror_r, mirror_w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?;
        let relay_size = fcntl_getpipe_size(relay_w)?;
        if fcntl_getpipe_size(&mirror_w)? < relay_size
            && fcntl_setpipe_size(&mirror_w, relay_size).is_err()
        {
            // The mirror cannot grow (pipe budget): shrink the relay's empty pipe to match.
            let mirror_size = fcntl_getpipe_size(&mirror_w)?;
            fcntl_setpipe_size(relay_w, mirror_size)?;
        }
        let file = rustix::fs::open(
            recording_path(base, n).as_path(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )?;
        Ok(Recorder {
            mirror_r,
            mirror_w,
            file,
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

    /// Writes the first `k` bytes of the mirror (those the client just accepted) to the file.
    pub fn commit(&mut self, k: usize) -> Result<(), Errno> {
        let mut left = k;
        while left > 0 {
            match splice(
                &self.mirror_r,
                None,
                &self.file,
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
}
