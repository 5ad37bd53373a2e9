//! `fdkit.aio`'s native parts for Python: the `LoopCore` that runs the loop's iteration on
//! asyncio's own objects, the loop methods that reach it (and the rule for when they may), the
//! socket transport's read and write paths, and the `Reactor` the io_uring engine waits with.
//! See `fdkit::aio` for the reactor itself.

mod asyncio_objects;
mod attrs;
mod bytes_out;
mod fastcall;
mod gil_cell;
mod loop_core;
mod loop_methods;
mod loop_rule;
mod native_method;
mod openssl;
mod reactor;
mod socket_transport;
mod timer_heap;
mod tls_records;

pub use loop_core::LoopCore;
pub use loop_methods::install_loop_methods;
pub use reactor::{defaults_dict as reactor_defaults_dict, PyReactor};
pub use socket_transport::install_write;
pub use tls_records::{install_tls, load_direct, FIELD_NAMES as TLS_RECORD_FIELDS};
