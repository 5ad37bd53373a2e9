//! `fdkit.uring`: io_uring for Python. `probe` says what this kernel supports, `ring` is the
//! `Ring` class (queue ops, submit, wait; its op methods are written from the core's op table,
//! `fdkit::ring_ops!`), `completion` the `Completion` objects it returns, `args` the extraction
//! its methods share and `op_args` how each kind of op argument is read. See io_uring(7).

mod args;
mod completion;
mod op_args;
mod probe;
mod ring;

pub use completion::PyCompletion;
pub use probe::{uring_kernel_check, uring_probe};
pub use ring::{ring_ops_table, PyRing};
