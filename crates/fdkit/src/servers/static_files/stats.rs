//! [`ServeStats`]: what a run did.

/// Counters of one run, returned when it stops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeStats {
    /// Responses sent (every status, errors included).
    pub requests: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Connections dropped by the idle timeout (slow or silent clients).
    pub timeouts: u64,
    /// Connections refused because the cap was reached (accepted and closed at once).
    pub refused: u64,
    /// The most connections open at once.
    pub peak_connections: usize,
    /// The connection cap in force (lower than asked when `RLIMIT_NOFILE` could not fit it).
    pub max_connections: usize,
}
