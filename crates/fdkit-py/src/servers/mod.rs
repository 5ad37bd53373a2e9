//! The native servers behind `fdkit serve` and `fdkit proxy`: their loops run in the core
//! with the GIL released; here their arguments are checked, their addresses resolved, and
//! their stats handed back. `run` is what both share: the loop under the signal checkpoint.

pub mod proxy;
mod run;
pub mod static_files;
