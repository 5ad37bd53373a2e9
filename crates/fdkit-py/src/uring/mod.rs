//! `fdkit.uring`: io_uring for Python. `probe` says what this kernel supports, `ring` is the
//! `Ring` class (queue ops, submit, wait), `completion` the `Completion` objects it returns,
//! `args` the extraction its methods share. See io_uring(7).

mod args;
mod completion;
mod probe;
mod ring;

pub use completion::PyCompletion;
pub use probe::uring_probe;
pub use ring::PyRing;
