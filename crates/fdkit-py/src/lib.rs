//! `fdkit._fdkit`: the PyO3 glue over the `fdkit` core. Arguments are extracted and checked
//! here, the GIL is released around anything that can block, and errors are mapped to Python
//! exceptions with their errno intact. No I/O logic lives here.
//!
//! The house, by capability (as the core is laid out): `fd/`, `zerocopy/`, `atomic_pipe/`,
//! `uring/`, `aio/`, `servers/`, each with a `mod.rs` that says what it holds. Shared by all:
//! `args` (argument extraction, the one duration reader), `errors` (the one kernel error →
//! `OSError` conversion), `gil` (releasing the GIL, running signal handlers), `closable` (the
//! one locking model for objects closed from any thread, and the error they raise once closed) and `pipe_size` (the int a pipe's
//! `size` is).

mod aio;
mod args;
mod atomic_pipe;
mod closable;
mod errors;
mod fd;
mod gil;
mod pipe_size;
mod servers;
mod uring;
mod zerocopy;

use pyo3::prelude::*;

/// The native module behind `fdkit`: fd-native syscalls, zero-copy transfer, atomic pipe
/// messages, io_uring, `fdkit.aio`'s native loop and reactor, and the native servers. Import the
/// public modules (`fdkit.fd`, `fdkit.zerocopy`, `fdkit.atomic_pipe`, `fdkit.uring`) rather
/// than this one.
///
/// `gil_used = true` (the default) stays: the glue keeps Python objects across calls only
/// under the GIL and was not audited for free-threaded builds.
#[pymodule]
mod _fdkit {
    use pyo3::prelude::*;

    #[pymodule_export]
    use crate::fd::accept::{accept, accept4, accept_many};
    #[pymodule_export]
    use crate::fd::files::{
        close, dup, dup2, fcntl, get_blocking, get_cloexec, ioctl, open, pipe, set_blocking,
        set_cloexec,
    };
    #[pymodule_export]
    use crate::fd::io::{
        lseek, pread, pwrite, read, readinto, recv, recv_into, send, sendfile, splice, tee, write,
    };
    #[pymodule_export]
    use crate::fd::msg::{recv_fds, recvfrom, recvfrom_into, recvmsg, send_fds, sendmsg, sendto};
    #[pymodule_export]
    use crate::fd::poll::poll;
    #[pymodule_export]
    use crate::fd::socket::{
        bind, connect, getpeername, getsockname, listen, shutdown, socket, socketpair,
    };
    #[pymodule_export]
    use crate::fd::sockopt::{getsockopt, setsockopt};
    #[pymodule_export]
    use crate::fd::stat::{fstat, lstat, stat};
    #[pymodule_export]
    use crate::fd::temp::{mkdtemp, mkstemp};

    #[pymodule_export]
    use crate::zerocopy::pipe::PyPipe;
    #[pymodule_export]
    use crate::zerocopy::relay::{proxy, relay};
    #[pymodule_export]
    use crate::zerocopy::transfer::{
        pipe_pool_clear, pipe_pool_idle, transfer, transfer_held, transfer_stats,
    };

    #[pymodule_export]
    use crate::aio::{
        install_loop_methods, install_tls, install_write, load_direct, LoopCore, PyReactor,
    };

    #[pymodule_export]
    use crate::atomic_pipe::{AtomicPipe, AtomicPipeEnds, ProtocolError};

    #[pymodule_export]
    use crate::uring::{uring_kernel_check, uring_probe, PyCompletion, PyRing};

    #[pymodule_export]
    use crate::servers::proxy::serve_proxy;
    #[pymodule_export]
    use crate::servers::static_files::serve_static;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add(
            "SERVE_DEFAULTS",
            crate::servers::static_files::defaults_dict(m.py())?,
        )?;
        m.add(
            "REACTOR_DEFAULTS",
            crate::aio::reactor_defaults_dict(m.py())?,
        )?;
        m.add(
            "ENGINE_NAMES",
            crate::servers::static_files::engine_names_dict(m.py())?,
        )?;
        m.add("RING_OPS", crate::uring::ring_ops_table(m.py())?)?;
        // Interned, as names in Python source are: the slots' names are the class's keys.
        m.add(
            "TLS_RECORD_FIELDS",
            pyo3::types::PyTuple::new(
                m.py(),
                crate::aio::TLS_RECORD_FIELDS.map(|n| pyo3::types::PyString::intern(m.py(), n)),
            )?,
        )?;
        m.add("PipeSize", crate::pipe_size::pipe_size_type(m.py())?)?;
        m.add(
            "Decompressed",
            crate::atomic_pipe::decompressed_type(m.py())?,
        )?;
        Ok(())
    }
}
