//! `fdkit.aio`'s engine for Python: the `Reactor` class the event loop drives. See
//! `fdkit::aio` for what it does; this is argument glue.

mod reactor;

pub use reactor::PyReactor;
