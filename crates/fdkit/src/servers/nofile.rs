//! Making room for a server's connection cap under `RLIMIT_NOFILE` (the proxy and the static
//! file server share this).

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// The soft `RLIMIT_NOFILE` as it was before the run, put back on drop.
#[derive(Debug)]
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
    let fit = fit_nofile_with(max_connections, per_connection, spare, spare);
    (fit.cap, fit.notice, fit.guard)
}

/// What [`fit_nofile_with`] settled on.
pub(crate) struct NofileFit {
    /// The connection cap that fits.
    pub cap: usize,
    /// Why the cap is lower than asked, when it is.
    pub notice: Option<String>,
    /// Puts the old soft limit back on drop.
    pub guard: NofileGuard,
    /// The fds left beyond those open now and `cap` full connections: at least `spare` (when
    /// the limit allows one connection and that), more when the limit allows more.
    pub left: usize,
}

/// [`fit_nofile`] that also asks for `want_spare` (≥ `spare`) fds beyond the connections
/// when the hard limit allows, for something that uses what is left elastically (the static
/// server's open-file cache). Connections come first: the cap is lowered only to keep
/// `spare`. [`NofileFit::left`] says what there is beyond the connections. See getrlimit(2).
pub(crate) fn fit_nofile_with(
    max_connections: usize,
    per_connection: usize,
    spare: usize,
    want_spare: usize,
) -> NofileFit {
    let in_use = open_fds();
    let conns = max_connections.saturating_mul(per_connection);
    let needed = conns.saturating_add(in_use + spare);
    let wanted = conns.saturating_add(in_use + want_spare.max(spare));
    let limit = getrlimit(Resource::Nofile);
    let soft = limit.current.map_or(usize::MAX, clamp);
    let hard = limit.maximum.map_or(usize::MAX, clamp);
    let mut guard = NofileGuard(None);
    let mut have = soft;
    if soft < wanted {
        let want = wanted.min(hard);
        if want > soft {
            let raised = Rlimit {
                current: Some(want as u64),
                maximum: limit.maximum,
            };
            if setrlimit(Resource::Nofile, raised).is_ok() {
                guard.0 = Some(limit);
                have = want;
            }
        }
    }
    if have >= needed {
        return NofileFit {
            cap: max_connections,
            notice: None,
            guard,
            left: have.saturating_sub(in_use).saturating_sub(conns),
        };
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
    NofileFit {
        cap,
        notice: Some(notice),
        guard,
        left: have.saturating_sub(in_use + cap * per_connection.max(1)),
    }
}

fn clamp(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// How many fds this process has open now (a guess of 64 when `/proc` is not mounted).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count())
}
