//! Setting a ring up, waiting on it, and the kernel version: the one place that turns the
//! wanted setup flags into io_uring_setup(2) calls, shared by [`Ring`](super::Ring), the
//! [`probe`](super::probe), the static server's io_uring engine and the tests.
//!
//! [`Setup`] is a builder in the manner of the io-uring crate's `Builder`: it names what is
//! wanted (`SINGLE_ISSUER | DEFER_TASKRUN` required, refused or preferred; `SUBMIT_ALL`
//! preferred; the completion queue size) and [`Setup::build`] tries the best setup first,
//! falling back only when the kernel answers `EINVAL` ("not this kernel"). See
//! io_uring_setup(2), io_uring_queue_init_params(3).

use super::errno::errno;
use io_uring::{types, IoUring};
use rustix::io::Errno;
use std::time::Duration;

/// What a ring is set up with; [`Setup::build`] makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Setup {
    entries: u32,
    cq_entries: Option<u32>,
    defer_taskrun: Option<bool>,
    submit_all: bool,
}

/// A ring [`Setup::build`] made, and the flags it got.
pub(crate) struct Built {
    pub ring: IoUring,
    /// Whether the ring runs with `SINGLE_ISSUER | DEFER_TASKRUN` (then only the thread that
    /// built it may enter it).
    pub defer_taskrun: bool,
}

impl Setup {
    /// `entries` submission queue entries; `DEFER_TASKRUN` and `SUBMIT_ALL` when the kernel
    /// has them; the kernel's completion queue size (twice `entries`).
    pub fn new(entries: u32) -> Setup {
        Setup {
            entries,
            cq_entries: None,
            defer_taskrun: None,
            submit_all: true,
        }
    }

    /// `IORING_SETUP_CQSIZE`: this many completion queue entries.
    pub fn cq_entries(mut self, cq: Option<u32>) -> Setup {
        self.cq_entries = cq;
        self
    }

    /// `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN` (Linux 6.1): `Some(true)`
    /// requires it, `Some(false)` refuses it, `None` uses it when the kernel accepts it.
    pub fn defer_taskrun(mut self, defer: Option<bool>) -> Setup {
        self.defer_taskrun = defer;
        self
    }

    /// `IORING_SETUP_SUBMIT_ALL` (Linux 5.18: an op that fails to queue does not stop the ones
    /// after it) when the kernel has it; `false` never asks for it.
    pub fn submit_all(mut self, submit_all: bool) -> Setup {
        self.submit_all = submit_all;
        self
    }

    /// io_uring_setup(2), best setup first: with `DEFER_TASKRUN` before without (unless
    /// required or refused), with `SUBMIT_ALL` before without. `EINVAL` means "not this
    /// kernel" and tries the next; any other errno (`ENOSYS`, `EPERM`, `ENOMEM`) ends it.
    pub fn build(&self) -> Result<Built, Errno> {
        let defer: &[bool] = match self.defer_taskrun {
            Some(true) => &[true],
            None => &[true, false],
            Some(false) => &[false],
        };
        let submit_all: &[bool] = if self.submit_all {
            &[true, false]
        } else {
            &[false]
        };
        let mut last = Errno::INVAL;
        for (d, coop) in defer.iter().flat_map(|&d| {
            if d {
                vec![(true, false)]
            } else {
                vec![(false, true), (false, false)]
            }
        }) {
            for &s in submit_all {
                let mut b = IoUring::builder();
                if d {
                    b.setup_single_issuer().setup_defer_taskrun();
                } else if coop {
                    // COOP_TASKRUN | TASKRUN_FLAG (Linux 5.19): completions that arrive while
                    // the task runs are not forced on it with a signal-like interrupt (which,
                    // under a many-connection load, costs more than the work itself);
                    // the kernel raises IORING_SQ_TASKRUN and the next reap enters to run them.
                    b.setup_coop_taskrun().setup_taskrun_flag();
                }
                if s {
                    b.setup_submit_all();
                }
                if let Some(cq) = self.cq_entries {
                    b.setup_cqsize(cq);
                }
                match b.build(self.entries) {
                    Ok(ring) => {
                        return Ok(Built {
                            ring,
                            defer_taskrun: d,
                        })
                    }
                    Err(e) => {
                        last = errno(&e);
                        if last != Errno::INVAL {
                            return Err(last);
                        }
                    }
                }
            }
        }
        Err(last)
    }
}

/// Submits what is queued and waits until `want` completions are posted or `timeout` passes
/// (`IORING_ENTER_EXT_ARG`, Linux 5.11). Running out of time (`ETIME`), a busy completion
/// queue (`EBUSY`) and `EAGAIN` are not errors; `EINTR` is (the caller decides). See
/// io_uring_enter(2), io_uring_submit_and_wait_timeout(3).
pub(crate) fn enter_timeout(ring: &IoUring, want: usize, timeout: Duration) -> Result<(), Errno> {
    let ts = types::Timespec::from(timeout);
    let args = types::SubmitArgs::new().timespec(&ts);
    match ring.submitter().submit_with_args(want, &args) {
        Ok(_) => Ok(()),
        Err(e) => match errno(&e) {
            Errno::TIME | Errno::BUSY | Errno::AGAIN => Ok(()),
            other => Err(other),
        },
    }
}

/// The running kernel's version, from uname(2): what decides features the probe cannot see
/// (multishot receive and provided-buffer rings need Linux 6.0).
///
/// ```
/// use fdkit::uring::KernelVersion;
///
/// let v = KernelVersion::parse("6.8.0-45-generic");
/// assert!(v.at_least(6, 0) && !v.at_least(6, 9));
/// println!("running Linux {}.{}", KernelVersion::running().major, KernelVersion::running().minor);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelVersion {
    /// The major number (`6` of `6.8.0-45-generic`); 0 when the release is not `N.N…`.
    pub major: u32,
    /// The minor number (`8` of `6.8.0-45-generic`).
    pub minor: u32,
    /// The release as uname(2) gives it.
    pub release: String,
}

impl KernelVersion {
    /// The running kernel's. See uname(2).
    pub fn running() -> KernelVersion {
        KernelVersion::parse(&rustix::system::uname().release().to_string_lossy())
    }

    /// `6.8.0-45-generic` → 6, 8. Anything that does not start with two numbers is 0.0.
    pub fn parse(release: &str) -> KernelVersion {
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let major = next();
        let minor = if major == 0 { 0 } else { next() };
        KernelVersion {
            major,
            minor,
            release: release.to_owned(),
        }
    }

    /// Whether this is Linux `major.minor` or later.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }

    /// Whether this kernel is at least [`MIN_KERNEL`]; when not, why `what` cannot run
    /// here: `{what} needs Linux 6.0; this kernel is {release}`.
    pub fn check_min(&self, what: &str) -> Result<(), String> {
        let (major, minor) = MIN_KERNEL;
        if self.at_least(major, minor) {
            Ok(())
        } else {
            Err(format!(
                "{what} needs Linux {major}.{minor}; this kernel is {}",
                self.release
            ))
        }
    }
}

/// The oldest kernel fdkit's io_uring engines run on, the one floor both check
/// ([`KernelVersion::check_min`]; Python reads it through `_fdkit.uring_kernel_check`): Linux
/// 6.0. The static server needs it (multishot receive, provided-buffer rings); `fdkit.aio`'s
/// reactor only polls, cancels and waits with a timeout (5.11 would do), and 6.0 is the floor
/// it has been run on.
pub const MIN_KERNEL: (u32, u32) = (6, 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_parse() {
        let v = KernelVersion::parse("6.8.0-45-generic");
        assert_eq!((v.major, v.minor), (6, 8));
        assert!(v.at_least(6, 0) && v.at_least(6, 8) && !v.at_least(6, 9) && !v.at_least(7, 0));
        let v = KernelVersion::parse("5.15.167.4-microsoft-standard-WSL2");
        assert_eq!((v.major, v.minor), (5, 15));
        assert!(!v.at_least(6, 0));
        assert_eq!(KernelVersion::parse("6").minor, 0);
        let v = KernelVersion::parse("weird");
        assert_eq!((v.major, v.minor), (0, 0));
        assert!(!v.at_least(1, 0));
        assert_eq!(KernelVersion::parse("6.0.1").check_min("x"), Ok(()));
        assert_eq!(
            KernelVersion::parse("5.15.0-91-generic").check_min("multishot receive"),
            Err("multishot receive needs Linux 6.0; this kernel is 5.15.0-91-generic".into())
        );
    }

    #[test]
    fn setup_tries_the_best_flags_first() {
        let Ok(built) = Setup::new(4).build() else {
            return; // no io_uring here: nothing to set up
        };
        assert_eq!(built.ring.params().sq_entries(), 4);
        let Ok(refused) = Setup::new(4).defer_taskrun(Some(false)).build() else {
            panic!("a plain ring after a DEFER_TASKRUN one");
        };
        assert!(!refused.defer_taskrun);
        let sized = Setup::new(4).cq_entries(Some(64)).build().expect("CQSIZE");
        assert_eq!(sized.ring.params().cq_entries(), 64);
        assert_eq!(
            Setup::new(0).build().err(),
            Some(Errno::INVAL),
            "0 entries: EINVAL after every fallback"
        );
    }
}
