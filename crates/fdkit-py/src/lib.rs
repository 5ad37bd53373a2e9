//! `fdkit._fdkit`: the PyO3 glue over the `fdkit` core. Arguments are extracted and checked
//! here, the GIL is released around anything that can block, and errors are mapped to Python
//! exceptions with their errno intact. No I/O logic lives here.

mod addr;
mod args;
mod atomic_pipe;
mod atomic_pipe_options;
mod closable;
mod errors;
mod files;
mod fork_safe_lock;
mod io;
mod net;
mod proxy_server;
mod serve;
mod server_run;
mod uring;
mod uring_args;
mod uring_completion;
mod uring_ring;
mod zerocopy;

use pyo3::prelude::*;

/// The native module. `gil_used = true` (the default) stays: the glue keeps Python objects
/// across calls only under the GIL and was not audited for free-threaded builds.
#[pymodule]
fn _fdkit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(net::socket, m)?)?;
    m.add_function(wrap_pyfunction!(net::socketpair, m)?)?;
    m.add_function(wrap_pyfunction!(net::bind, m)?)?;
    m.add_function(wrap_pyfunction!(net::listen, m)?)?;
    m.add_function(wrap_pyfunction!(net::accept, m)?)?;
    m.add_function(wrap_pyfunction!(net::accept4, m)?)?;
    m.add_function(wrap_pyfunction!(net::accept_many, m)?)?;
    m.add_function(wrap_pyfunction!(net::connect, m)?)?;
    m.add_function(wrap_pyfunction!(net::shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(net::getsockname, m)?)?;
    m.add_function(wrap_pyfunction!(net::getpeername, m)?)?;
    m.add_function(wrap_pyfunction!(net::getsockopt, m)?)?;
    m.add_function(wrap_pyfunction!(net::setsockopt, m)?)?;
    m.add_function(wrap_pyfunction!(io::read, m)?)?;
    m.add_function(wrap_pyfunction!(io::readinto, m)?)?;
    m.add_function(wrap_pyfunction!(io::pread, m)?)?;
    m.add_function(wrap_pyfunction!(io::write, m)?)?;
    m.add_function(wrap_pyfunction!(io::pwrite, m)?)?;
    m.add_function(wrap_pyfunction!(io::recv, m)?)?;
    m.add_function(wrap_pyfunction!(io::recv_into, m)?)?;
    m.add_function(wrap_pyfunction!(io::send, m)?)?;
    m.add_function(wrap_pyfunction!(io::sendfile, m)?)?;
    m.add_function(wrap_pyfunction!(io::lseek, m)?)?;
    m.add_function(wrap_pyfunction!(files::open, m)?)?;
    m.add_function(wrap_pyfunction!(files::close, m)?)?;
    m.add_function(wrap_pyfunction!(files::pipe, m)?)?;
    m.add_function(wrap_pyfunction!(files::dup, m)?)?;
    m.add_function(wrap_pyfunction!(files::dup2, m)?)?;
    m.add_function(wrap_pyfunction!(files::fcntl, m)?)?;
    m.add_function(wrap_pyfunction!(files::get_blocking, m)?)?;
    m.add_function(wrap_pyfunction!(files::set_blocking, m)?)?;
    m.add_function(wrap_pyfunction!(files::get_cloexec, m)?)?;
    m.add_function(wrap_pyfunction!(files::set_cloexec, m)?)?;
    m.add_function(wrap_pyfunction!(files::mkstemp, m)?)?;
    m.add_function(wrap_pyfunction!(files::mkdtemp, m)?)?;
    m.add_function(wrap_pyfunction!(files::stat, m)?)?;
    m.add_function(wrap_pyfunction!(files::lstat, m)?)?;
    m.add_function(wrap_pyfunction!(files::fstat, m)?)?;
    m.add_function(wrap_pyfunction!(files::poll, m)?)?;
    m.add_function(wrap_pyfunction!(uring::uring_probe, m)?)?;
    zerocopy::register(m)?;
    proxy_server::register(m)?;
    serve::register(m)?;
    atomic_pipe::register(m)?;
    uring_ring::register(m)?;
    Ok(())
}
