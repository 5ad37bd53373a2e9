//! Following a host-name upstream while serving: a worker thread resolves the name again every
//! so often and hands a changed answer to the loop, which reads it at its 100 ms tick.
//!
//! The loop never waits on the resolver: getaddrinfo(3) can block for the resolver's whole
//! timeout, so it runs on its own thread, and the loop only loads an atomic counter each tick
//! (and takes a lock when the counter moved). A name whose addresses change (a Kubernetes
//! Service recreated, a DNS failover) is followed by new connections within one period;
//! connections already open keep the address they connected to.

use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

/// A name lookup: the addresses of `host` with `port`, best first.
pub type Lookup = dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync;

/// An upstream spelled with a host name, and how often to resolve it again while serving.
#[derive(Clone)]
pub struct UpstreamName {
    /// The host name, as given.
    pub host: String,
    /// The port.
    pub port: u16,
    /// How long after one answer the next lookup starts.
    pub every: Duration,
    lookup: Arc<Lookup>,
}

impl UpstreamName {
    /// `host:port`, resolved with getaddrinfo(3) every `every`.
    pub fn new(host: impl Into<String>, port: u16, every: Duration) -> Self {
        UpstreamName {
            host: host.into(),
            port,
            every,
            lookup: Arc::new(|host: &str, port: u16| Ok((host, port).to_socket_addrs()?.collect())),
        }
    }

    /// The same name answered by `lookup` instead of getaddrinfo(3) (a test's own resolver,
    /// a service registry).
    pub fn with_lookup(
        mut self,
        lookup: impl Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync + 'static,
    ) -> Self {
        self.lookup = Arc::new(lookup);
        self
    }

    /// Resolves the name now (blocks while the resolver works); an empty answer is `NotFound`.
    pub fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
        let addrs = (self.lookup)(&self.host, self.port)?;
        if addrs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the host has no address",
            ));
        }
        Ok(addrs)
    }
}

impl fmt::Debug for UpstreamName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamName")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

/// What the worker found since the loop last looked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Update {
    /// The name now has these addresses (a set different from the last one handed over).
    Addresses(Vec<SocketAddr>),
    /// The lookup failed (the first failure after a success): the last address stays.
    Failed(String),
}

struct Shared {
    /// Bumped every time `update` is set: the loop's cheap "anything new?".
    version: AtomicU64,
    update: Mutex<Option<Update>>,
    stopping: Mutex<bool>,
    wake: Condvar,
}

/// The worker that resolves an [`UpstreamName`] again and again; it stops when this is
/// dropped (at once, unless a lookup is in progress: then when that lookup returns).
pub(super) struct Resolver {
    shared: Arc<Shared>,
    seen: u64,
}

impl Resolver {
    /// Starts the worker; `first` is the answer the server started with.
    pub fn spawn(name: UpstreamName, first: Vec<SocketAddr>) -> io::Result<Resolver> {
        let shared = Arc::new(Shared {
            version: AtomicU64::new(0),
            update: Mutex::new(None),
            stopping: Mutex::new(false),
            wake: Condvar::new(),
        });
        let worker = shared.clone();
        thread::Builder::new()
            .name("fdkit-resolve".to_owned())
            .spawn(move || work(&name, first, &worker))?;
        Ok(Resolver { shared, seen: 0 })
    }

    /// What changed since the last call, if anything: one atomic load when nothing did.
    pub fn poll(&mut self) -> Option<Update> {
        let version = self.shared.version.load(Ordering::Acquire);
        if version == self.seen {
            return None;
        }
        self.seen = version;
        lock(&self.shared.update).take()
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        *lock(&self.shared.stopping) = true;
        self.shared.wake.notify_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The worker's loop: wait a period (or until stopped), resolve, hand over what changed.
fn work(name: &UpstreamName, first: Vec<SocketAddr>, shared: &Shared) {
    let mut last = sorted(first);
    let mut failing = false;
    loop {
        {
            let stopping = lock(&shared.stopping);
            let (stopping, _) = shared
                .wake
                .wait_timeout_while(stopping, name.every, |stop| !*stop)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if *stopping {
                return;
            }
        }
        let update = match name.resolve() {
            Ok(addrs) => {
                let recovered = std::mem::replace(&mut failing, false);
                // The order of an unchanged set may rotate (round-robin DNS): not a change.
                // After a failure the answer is handed over even so: the loop says it is back.
                let set = sorted(addrs.clone());
                if set == last && !recovered {
                    continue;
                }
                last = set;
                Update::Addresses(addrs)
            }
            Err(_) if failing => continue,
            Err(e) => {
                failing = true;
                Update::Failed(e.to_string())
            }
        };
        *lock(&shared.update) = Some(update);
        shared.version.fetch_add(1, Ordering::Release);
    }
}

fn sorted(mut addrs: Vec<SocketAddr>) -> Vec<SocketAddr> {
    addrs.sort_unstable();
    addrs.dedup();
    addrs
}
