//! Making room for the connection cap under `RLIMIT_NOFILE` (each connection holds one fd,
//! plus the fds of the files it is sending, which the open-file cache shares).

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Fds kept free for the listener, the ring or epoll set, cached files and the host program.
const SPARE_FDS: usize = 256;

/// The soft `RLIMIT_NOFILE` as it was before the run, put back on drop.
pub(super) struct NofileGuard(Option<Rlimit>);

impl Drop for NofileGuard {
    fn drop(&mut self) {
        if let Some(old) = self.0.take() {
            let _ = setrlimit(Resource::Nofile, old);
        }
    }
}

/// Raises the soft limit toward `max_connections` + spare (never above the hard limit) and
/// returns the cap that fits, with a notice when it had to be lowered. See getrlimit(2).
pub(super) fn fit_nofile(max_connections: usize) -> (usize, Option<String>, NofileGuard) {
    let needed = max_connections.saturating_add(SPARE_FDS);
    let limit = getrlimit(Resource::Nofile);
    let clamp = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    let soft = limit.current.map_or(usize::MAX, clamp);
    let hard = limit.maximum.map_or(usize::MAX, clamp);
    let mut guard = NofileGuard(None);
    let mut have = soft;
    if soft < needed {
        let want = needed.min(hard);
        let raised = Rlimit {
            current: Some(want as u64),
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            guard.0 = Some(limit);
            have = want;
        }
    }
    if have >= needed {
        return (max_connections, None, guard);
    }
    let cap = have.saturating_sub(SPARE_FDS).max(1);
    let notice = format!(
        "max connections lowered from {max_connections} to {cap}: RLIMIT_NOFILE allows {have} \
         open files"
    );
    (cap, Some(notice), guard)
}
