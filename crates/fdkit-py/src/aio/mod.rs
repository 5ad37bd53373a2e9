//! `fdkit.aio`'s native parts for Python: the `LoopCore` that runs the loop's iteration on
//! asyncio's own objects, the socket transport's read and write paths, and the `Reactor` the
//! io_uring engine waits with. See `fdkit::aio` for the reactor itself.

mod asyncio_objects;
mod attrs;
mod gil_cell;
mod loop_core;
mod reactor;
mod socket_transport;

pub use loop_core::LoopCore;
pub use reactor::{defaults_dict as reactor_defaults_dict, PyReactor};
pub use socket_transport::install_write;
