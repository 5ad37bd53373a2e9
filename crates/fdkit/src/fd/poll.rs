//! `poll` that keeps its deadline across signals.

use rustix::event::{PollFd, Timespec};
use rustix::io::Errno;
use std::time::{Duration, Instant};

/// `poll(fds, nfds, timeout)`: waits until an fd is ready or `timeout` passes (`None`: forever).
///
/// On `EINTR` it calls `checkpoint` and, if that says go on, polls again for what is left of the
/// original timeout rather than starting it over. Returns how many fds have events. See poll(2).
pub fn poll(
    fds: &mut [PollFd<'_>],
    timeout: Option<Duration>,
    mut checkpoint: impl FnMut() -> Result<(), Errno>,
) -> rustix::io::Result<usize> {
    let deadline = timeout.map(|t| Instant::now().checked_add(t));
    loop {
        let remaining = match deadline {
            None => None,
            // A deadline past what Instant can hold is as good as forever.
            Some(None) => None,
            Some(Some(d)) => Some(d.saturating_duration_since(Instant::now())),
        };
        let ts = remaining.map(|r| Timespec {
            tv_sec: r.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: r.subsec_nanos().into(),
        });
        match rustix::event::poll(fds, ts.as_ref()) {
            Err(Errno::INTR) => checkpoint()?,
            other => return other,
        }
    }
}
