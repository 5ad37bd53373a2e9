//! io_uring: what this kernel offers (the ring API and servers build on this probe).

mod probe;

pub use probe::{probe, Availability, OpSupport};
