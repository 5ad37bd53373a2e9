//! Making room for a server's connection cap under `RLIMIT_NOFILE` (the proxy and the static
//! file server share this).

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// The soft `RLIMIT_NOFILE` as it was before the run, put back on drop.
pub(crate) struct NofileGuard(Option<Rlimit>);

impl Drop for NofileGuard {
    fn drop(&mut self) {
        if let Some(old) = self.0.take() {
            let _ = setrlimit(Resource::Nofile, old);
        }
    }
}

/// Raises the soft `RLIMIT_NOFILE` toward what `max_connections` connections of
/// `per_connection` fds each need, plus the fds open now and `spare` more for everything else
/// (never above the hard limit), and returns the cap that fits, with a notice when it had to
/// be lowered. See getrlimit(2).
pub(crate) fn fit_nofile(
    max_connections: usize,
    per_connection: usize,
    spare: usize,
) -> (usize, Option<String>, NofileGuard) {
    let in_use = open_fds();
    let needed = max_connections
        .saturating_mul(per_connection)
        .saturating_add(in_use + spare);
    let limit = getrlimit(Resource::Nofile);
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
    let fit = have.saturating_sub(in_use + spare) / per_connection.max(1);
    let cap = fit.max(1);
    let notice = format!(
        "max connections lowered from {max_connections} to {cap}: RLIMIT_NOFILE allows {have} \
         open files (hard limit {}) and each connection needs {per_connection}",
        limit
            .maximum
            .map_or_else(|| "unlimited".to_owned(), |h| h.to_string()),
    );
    (cap, Some(notice), guard)
}

fn clamp(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// How many fds this process has open now (a guess of 64 when `/proc` is not mounted).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count())
}
