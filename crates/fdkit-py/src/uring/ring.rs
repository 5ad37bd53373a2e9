//! `Ring`: the core's safe io_uring for Python. Thin glue: arguments are checked and turned
//! into Rust values with the GIL held; the ring sits in a [`Closable`] (the binding's one
//! locking model, shared with `AtomicPipe` and `Pipe`: a close from any thread ends a `wait()`
//! in another with ValueError within a slice, and frees the ring only once it has left) and,
//! inside it, behind a `std::sync::Mutex` that is only ever waited for with the GIL released
//! (a `try_lock` first, which never blocks); waits run with the GIL released in bounded
//! slices, with Python's signal handlers run and the closing flag checked in between.

use super::args::{self, send_data, user_data_arg};
use super::completion::PyCompletion;
use crate::args::{i32_arg, u16_arg, u32_arg, Count, Fd, PathArg, Seconds};
use crate::closable::{closed_error, Closable, Release, Use};
use crate::errors::core_error;
use crate::gil::without_gil;
use fdkit::fd::Errno;
use fdkit::uring::{Ring, RingOptions, SqeFlags, Target};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use rustix::event::PollFlags;
use rustix::net::SocketType;
use rustix::net::{AddressFamily, Protocol, RecvFlags, SendFlags, Shutdown, SocketFlags};
use rustix::pipe::SpliceFlags;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Instant;

/// `ValueError("I/O operation on a closed Ring")`.
fn closed_ring() -> PyErr {
    closed_error("Ring")
}

/// An io_uring instance: queue ops (each with a `user_data` int you choose), `submit()`, and
/// `wait()` for their `Completion`s. A context manager; `close()` cancels what is in flight,
/// waits (bounded) for it, and frees everything. See io_uring(7).
///
/// The ring keeps every buffer an op uses until its last completion arrives: `bytes` handed
/// to `send`/`write` are referenced, other buffers copied; receive buffers are the ring's own.
/// With `defer_taskrun` (the default where the kernel supports it) only the thread that
/// created the ring may submit or wait; others get `OSError(EEXIST)` (and such a ring closed
/// or collected on another thread cannot reap: what its ops hold is leaked, never freed under
/// the kernel).
#[pyclass(frozen, module = "fdkit._fdkit", name = "Ring")]
pub struct PyRing {
    inner: Closable<RingCell>,
    defer_taskrun: bool,
    sq_entries: u32,
    cq_entries: u32,
}

/// What the [`Closable`] holds: the ring (None once torn down) and its fd number.
struct RingCell {
    ring: Mutex<Option<Ring>>,
    fd: AtomicI32,
}

impl RingCell {
    fn lock(&self) -> MutexGuard<'_, Option<Ring>> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Release for RingCell {
    /// Cancels what is in flight, reaps it (bounded) and closes the ring, with the GIL
    /// released.
    fn release(&mut self, py: Python<'_>, _deferred: bool) -> PyResult<()> {
        let ring = self
            .ring
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.fd.store(-1, Ordering::Relaxed);
        without_gil(py, move || drop(ring));
        Ok(())
    }

    fn is_released(&self) -> bool {
        self.lock().is_none()
    }
}

impl PyRing {
    /// Starts a use of the ring (see `closable`), or the closed error.
    fn enter<'py>(&self, py: Python<'py>) -> PyResult<Use<'_, 'py, RingCell>> {
        self.inner.enter(py).ok_or_else(closed_ring)
    }

    /// Runs `f` on the open ring: with the GIL held when the mutex is free, else with the GIL
    /// released while waiting for it (a `wait()` holds it for one slice at most).
    fn with_ring<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Ring) -> PyResult<T> + Send,
    ) -> PyResult<T> {
        let cell = self.enter(py)?;
        let cell: &RingCell = &cell;
        let run = |mut guard: MutexGuard<'_, Option<Ring>>| match guard.as_mut() {
            Some(ring) => f(ring),
            None => Err(closed_ring()),
        };
        let result = match cell.ring.try_lock() {
            Ok(guard) => run(guard),
            Err(TryLockError::Poisoned(p)) => run(p.into_inner()),
            Err(TryLockError::WouldBlock) => py.detach(|| run(cell.lock())),
        };
        result
    }

    /// Runs `f` with the GIL released (for calls that enter the kernel and may wait).
    fn detached<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Ring) -> PyResult<T> + Send,
    ) -> PyResult<T> {
        let cell = self.enter(py)?;
        let cell: &RingCell = &cell;
        py.detach(|| match cell.lock().as_mut() {
            Some(ring) => f(ring),
            None => Err(closed_ring()),
        })
    }

    /// Queues one op with the SQE flags the keywords `sqe` ask for.
    fn queue_with(
        &self,
        py: Python<'_>,
        sqe: Option<&Bound<'_, PyDict>>,
        f: impl FnOnce(&mut Ring) -> fdkit::error::Result<()> + Send,
    ) -> PyResult<()> {
        let fl = sqe_flags(sqe)?;
        self.queue(py, move |r| r.with_flags(fl, f))
    }

    /// Queues one op (no kernel entry unless the submission queue is full).
    fn queue(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Ring) -> fdkit::error::Result<()> + Send,
    ) -> PyResult<()> {
        self.with_ring(py, |ring| f(ring).map_err(core_error))
    }
}

/// The SQE flags every op takes as keywords (`ring.nop(1, link=True)`), each a bool: the one
/// list of their names (the stub's is `fdkit.types.SqeFlags`). `async_` is `IOSQE_ASYNC`,
/// `skip_success` `IOSQE_CQE_SKIP_SUCCESS`.
const SQE_KEYWORDS: [(&str, SqeFlags); 5] = [
    ("link", SqeFlags::IO_LINK),
    ("hardlink", SqeFlags::IO_HARDLINK),
    ("drain", SqeFlags::IO_DRAIN),
    ("async_", SqeFlags::ASYNC),
    ("skip_success", SqeFlags::SKIP_SUCCESS),
];

/// The SQE flags an op's `**sqe` keywords ask for: each of [`SQE_KEYWORDS`] a bool
/// (`TypeError` otherwise, as for any bool argument), any other keyword a `TypeError`.
fn sqe_flags(sqe: Option<&Bound<'_, PyDict>>) -> PyResult<SqeFlags> {
    let mut flags = SqeFlags::empty();
    let Some(sqe) = sqe else {
        return Ok(flags);
    };
    for (key, value) in sqe.iter() {
        let name = key.extract::<String>()?;
        let Some((_, flag)) = SQE_KEYWORDS.iter().find(|(n, _)| *n == name) else {
            let known: Vec<&str> = SQE_KEYWORDS.iter().map(|(n, _)| *n).collect();
            return Err(PyTypeError::new_err(format!(
                "got an unexpected keyword argument '{name}' (the SQE flags are {})",
                known.join(", ")
            )));
        };
        let on = value.extract::<bool>().map_err(|_| {
            PyTypeError::new_err(format!(
                "argument '{name}': '{}' object cannot be converted to 'bool'",
                crate::args::type_name(&value)
            ))
        })?;
        flags.set(*flag, on);
    }
    Ok(flags)
}

/// An op's fd: with `fixed`, an index into the registered files.
fn tgt(fd: Fd, fixed: bool) -> Target<'static> {
    if fixed {
        Target::Fixed(fd.0 as u32)
    } else {
        Target::Fd(fd.borrow())
    }
}

#[pymethods]
#[allow(clippy::too_many_arguments)]
impl PyRing {
    /// `Ring(entries=256, *, defer_taskrun=None, cq_entries=None)`: io_uring_setup(2) with
    /// `entries` submission entries (1..=32768) and `cq_entries` completion entries (default
    /// twice as many). `defer_taskrun`: True requires `SINGLE_ISSUER|DEFER_TASKRUN`, False
    /// refuses it, None uses it when the kernel can.
    #[new]
    #[pyo3(signature = (entries=256, *, defer_taskrun=None, cq_entries=None))]
    fn new(
        py: Python<'_>,
        #[pyo3(from_py_with = u32_arg)] entries: u32,
        defer_taskrun: Option<bool>,
        cq_entries: Option<Count>,
    ) -> PyResult<Self> {
        let cq_entries =
            match cq_entries {
                None => None,
                Some(c) => Some(u32::try_from(c.0).map_err(|_| {
                    PyValueError::new_err(format!("cq_entries out of range: {}", c.0))
                })?),
            };
        let options = RingOptions {
            entries,
            cq_entries,
            defer_taskrun,
        };
        let ring = py
            .detach(|| Ring::with_options(options))
            .map_err(core_error)?;
        Ok(PyRing {
            defer_taskrun: ring.defer_taskrun(),
            sq_entries: ring.sq_entries(),
            cq_entries: ring.cq_entries(),
            inner: Closable::new(RingCell {
                fd: AtomicI32::new(ring.as_raw_fd()),
                ring: Mutex::new(Some(ring)),
            }),
        })
    }

    /// `nop(user_data)`: completes with result 0. io_uring_prep_nop(3).
    #[pyo3(signature = (user_data, **sqe))]
    fn nop(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.queue_with(py, sqe, |r| r.nop(user_data))
    }

    /// `socket(family, type, user_data, *, proto=0)`: a new socket (close-on-exec; `type` may
    /// include `SOCK_NONBLOCK`); its fd is the completion's `result`, yours to close.
    /// io_uring_prep_socket(3).
    #[pyo3(signature = (family, r#type, user_data, *, proto=0, **sqe))]
    fn socket(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = u32_arg)] family: u32,
        #[pyo3(from_py_with = u32_arg)] r#type: u32,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] proto: u32,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let family = u16::try_from(family)
            .map(AddressFamily::from_raw)
            .map_err(|_| PyValueError::new_err(format!("invalid address family {family}")))?;
        let type_flags = (SocketFlags::NONBLOCK | SocketFlags::CLOEXEC).bits();
        let flags = SocketFlags::from_bits_retain(r#type & type_flags);
        let ty = SocketType::from_raw(r#type & !type_flags);
        let proto = std::num::NonZeroU32::new(proto).map(Protocol::from_raw);
        self.queue_with(py, sqe, |r| r.socket(family, ty, flags, proto, user_data))
    }

    /// `accept(fd, user_data, *, multishot=False, address=False, ...)`: a connection from
    /// listener `fd` (close-on-exec); its fd is the completion's `result`, yours to close.
    /// With `multishot`, one completion per connection (`more` while armed); with
    /// `address`, the completion's `address` is the peer's (not with `multishot`).
    /// io_uring_prep_accept(3), io_uring_prep_multishot_accept(3).
    #[pyo3(signature = (fd, user_data, *, multishot=false, address=false, fixed=false, **sqe))]
    fn accept(
        &self,
        py: Python<'_>,
        fd: Fd,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        multishot: bool,
        address: bool,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let t = tgt(fd, fixed);
        if multishot && address {
            return Err(PyValueError::new_err(
                "a multishot accept cannot collect addresses (use address=False)",
            ));
        }
        if multishot {
            self.queue_with(py, sqe, |r| r.accept_multishot(t, user_data))
        } else if address {
            self.queue_with(py, sqe, |r| r.accept_with_address(t, user_data))
        } else {
            self.queue_with(py, sqe, |r| r.accept(t, user_data))
        }
    }

    /// `connect(fd, address, user_data)`: `address` as for `socket.connect` (a `(host, port)`
    /// tuple, or a path for AF_UNIX). io_uring_prep_connect(3).
    #[pyo3(signature = (fd, address, user_data, **sqe))]
    fn connect(
        &self,
        py: Python<'_>,
        fd: Fd,
        address: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let addr = crate::fd::addr::from_py(address, fd.borrow())?;
        self.queue_with(py, sqe, |r| r.connect(fd.borrow(), &addr, user_data))
    }

    /// `recv(fd, nbytes, user_data, *, flags=0)`: up to `nbytes` bytes, in the completion's
    /// `data`. io_uring_prep_recv(3).
    #[pyo3(signature = (fd, nbytes, user_data, *, flags=0, fixed=false, **sqe))]
    fn recv(
        &self,
        py: Python<'_>,
        fd: Fd,
        nbytes: Count,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] flags: u32,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let n = args::nbytes(nbytes)?;
        let flags = RecvFlags::from_bits_retain(flags);
        self.queue_with(py, sqe, |r| r.recv(tgt(fd, fixed), n, flags, user_data))
    }

    /// `recv_multishot(fd, group, user_data)`: receives into buffer group `group` (see
    /// `provide_buffers`) until cancelled, end of stream (`result` 0) or an error: one
    /// completion per chunk, `more` while armed. `ENOBUFS` in `error` means the group ran dry;
    /// queue the receive again, no data is lost. io_uring_prep_recv_multishot(3).
    #[pyo3(signature = (fd, group, user_data, *, fixed=false, **sqe))]
    fn recv_multishot(
        &self,
        py: Python<'_>,
        fd: Fd,
        #[pyo3(from_py_with = u16_arg)] group: u16,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.queue_with(py, sqe, |r| {
            r.recv_multishot(tgt(fd, fixed), group, user_data)
        })
    }

    /// `provide_buffers(group, count, size)`: registers a provided-buffer ring of `count`
    /// buffers (a power of two up to 32768) of `size` bytes as group `group`
    /// (0..65535), at most 1 GiB in all. io_uring_register_buf_ring(3).
    fn provide_buffers(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = u16_arg)] group: u16,
        #[pyo3(from_py_with = u32_arg)] count: u32,
        #[pyo3(from_py_with = u32_arg)] size: u32,
    ) -> PyResult<()> {
        let count = u16::try_from(count)
            .ok()
            .filter(|c| c.is_power_of_two() && *c <= fdkit::uring::MAX_BUFFERS)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "count must be a power of two in 1..=32768, got {count}"
                ))
            })?;
        if size == 0 || size > 1 << 24 {
            return Err(PyValueError::new_err(format!(
                "size must be in 1..=16777216, got {size}"
            )));
        }
        if u64::from(count) * u64::from(size) > 1 << 30 {
            return Err(PyValueError::new_err("count * size must be at most 1 GiB"));
        }
        self.detached(py, |r| {
            r.provide_buffers(group, count, size).map_err(core_error)
        })
    }

    /// `send(fd, data, user_data, *, flags=0)`: sends `data` (any bytes-like object; `bytes`
    /// are kept by reference, others copied). io_uring_prep_send(3).
    #[pyo3(signature = (fd, data, user_data, *, flags=0, fixed=false, **sqe))]
    fn send(
        &self,
        py: Python<'_>,
        fd: Fd,
        data: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] flags: u32,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let data = send_data(data)?;
        let flags = SendFlags::from_bits_retain(flags);
        self.queue_with(py, sqe, |r| r.send(tgt(fd, fixed), data, flags, user_data))
    }

    /// `send_zc(fd, data, user_data, *, flags=0)`: a zero-copy send; two completions: the
    /// result (`more` set) and then the notification (`notif` set) once the kernel is done
    /// with `data`. io_uring_prep_send_zc(3).
    #[pyo3(signature = (fd, data, user_data, *, flags=0, fixed=false, **sqe))]
    fn send_zc(
        &self,
        py: Python<'_>,
        fd: Fd,
        data: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] flags: u32,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let data = send_data(data)?;
        let flags = SendFlags::from_bits_retain(flags);
        self.queue_with(py, sqe, |r| {
            r.send_zc(tgt(fd, fixed), data, flags, user_data)
        })
    }

    /// `read(fd, nbytes, user_data, *, offset=None)`: up to `nbytes` bytes at `offset` (None:
    /// the file position), in the completion's `data`. io_uring_prep_read(3).
    #[pyo3(signature = (fd, nbytes, user_data, *, offset=None, fixed=false, **sqe))]
    fn read(
        &self,
        py: Python<'_>,
        fd: Fd,
        nbytes: Count,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        offset: Option<Count>,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let n = args::nbytes(nbytes)?;
        let offset = offset.map(|o| o.0);
        self.queue_with(py, sqe, |r| r.read(tgt(fd, fixed), n, offset, user_data))
    }

    /// `write(fd, data, user_data, *, offset=None)`: writes `data` at `offset` (None: the file
    /// position). io_uring_prep_write(3).
    #[pyo3(signature = (fd, data, user_data, *, offset=None, fixed=false, **sqe))]
    fn write(
        &self,
        py: Python<'_>,
        fd: Fd,
        data: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        offset: Option<Count>,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let data = send_data(data)?;
        let offset = offset.map(|o| o.0);
        self.queue_with(py, sqe, |r| {
            r.write(tgt(fd, fixed), data, offset, user_data)
        })
    }

    /// `splice(fd_in, fd_out, nbytes, user_data, *, off_in=None, off_out=None, flags=0)`: moves
    /// up to `nbytes` bytes between two fds, one of them a pipe. io_uring_prep_splice(3).
    #[pyo3(signature = (fd_in, fd_out, nbytes, user_data, *, off_in=None, off_out=None, flags=0, **sqe))]
    #[allow(clippy::too_many_arguments)]
    fn splice(
        &self,
        py: Python<'_>,
        fd_in: Fd,
        fd_out: Fd,
        #[pyo3(from_py_with = u32_arg)] nbytes: u32,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        off_in: Option<Count>,
        off_out: Option<Count>,
        #[pyo3(from_py_with = u32_arg)] flags: u32,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let flags = SpliceFlags::from_bits_retain(flags);
        let (oi, oo) = (off_in.map(|o| o.0), off_out.map(|o| o.0));
        self.queue_with(py, sqe, |r| {
            r.splice(
                fd_in.borrow(),
                oi,
                fd_out.borrow(),
                oo,
                nbytes,
                flags,
                user_data,
            )
        })
    }

    /// `tee(fd_in, fd_out, nbytes, user_data, *, flags=0)`: duplicates up to `nbytes` bytes
    /// from one pipe into another. io_uring_prep_tee(3).
    #[pyo3(signature = (fd_in, fd_out, nbytes, user_data, *, flags=0, **sqe))]
    fn tee(
        &self,
        py: Python<'_>,
        fd_in: Fd,
        fd_out: Fd,
        #[pyo3(from_py_with = u32_arg)] nbytes: u32,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] flags: u32,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let flags = SpliceFlags::from_bits_retain(flags);
        self.queue_with(py, sqe, |r| {
            r.tee(fd_in.borrow(), fd_out.borrow(), nbytes, flags, user_data)
        })
    }

    /// `shutdown(fd, how, user_data)`: `how` is `socket.SHUT_RD`, `SHUT_WR` or `SHUT_RDWR`.
    /// io_uring_prep_shutdown(3).
    #[pyo3(signature = (fd, how, user_data, *, fixed=false, **sqe))]
    fn shutdown(
        &self,
        py: Python<'_>,
        fd: Fd,
        #[pyo3(from_py_with = i32_arg)] how: i32,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let how = match how {
            0 => Shutdown::Read,
            1 => Shutdown::Write,
            2 => Shutdown::Both,
            other => {
                return Err(PyValueError::new_err(format!(
                    "how must be SHUT_RD, SHUT_WR or SHUT_RDWR, got {other}"
                )))
            }
        };
        self.queue_with(py, sqe, |r| r.shutdown(tgt(fd, fixed), how, user_data))
    }

    /// `close_fd(fd, user_data)`: closes `fd` through the ring (the fd is the ring's from
    /// now on; if queueing fails it is left open and the error raised).
    /// io_uring_prep_close(3).
    #[pyo3(signature = (fd, user_data, **sqe))]
    fn close_fd(
        &self,
        py: Python<'_>,
        fd: Fd,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let fl = sqe_flags(sqe)?;
        self.with_ring(py, |r| {
            // SAFETY: the Python caller hands this fd number over to be closed, as with
            // `os.close`; if queueing fails it is given back below without being closed.
            let owned = unsafe { OwnedFd::from_raw_fd(fd.0) };
            r.with_flags(fl, |r| {
                r.close_fd(owned, user_data).map_err(|(e, owned)| {
                    let _ = owned.into_raw_fd();
                    e
                })
            })
            .map_err(core_error)
        })
    }

    /// `poll_add(fd, events, user_data, *, multishot=False)`: completes with the ready events
    /// (`select.POLLIN`…) in `result`. io_uring_prep_poll_add(3).
    #[pyo3(signature = (fd, events, user_data, *, multishot=false, fixed=false, **sqe))]
    fn poll_add(
        &self,
        py: Python<'_>,
        fd: Fd,
        #[pyo3(from_py_with = u32_arg)] events: u32,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        multishot: bool,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let events = u16::try_from(events)
            .map(PollFlags::from_bits_retain)
            .map_err(|_| PyValueError::new_err(format!("events out of range: {events}")))?;
        self.queue_with(py, sqe, |r| {
            r.poll_add(tgt(fd, fixed), events, multishot, user_data)
        })
    }

    /// `timeout(seconds, user_data, *, count=0)`: completes with `error` `ETIME` after
    /// `seconds`, or with result 0 once `count` other completions arrived (`count` 0: time
    /// only). io_uring_prep_timeout(3).
    #[pyo3(signature = (seconds, user_data, *, count=0, **sqe))]
    fn timeout(
        &self,
        py: Python<'_>,
        seconds: f64,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] count: u32,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let d = Seconds::wait("timeout").of(seconds)?;
        self.queue_with(py, sqe, |r| r.timeout(d, count, user_data))
    }

    /// `cancel(target_user_data, user_data)`: cancels every op in flight with user_data
    /// `target_user_data`. Its completion comes after the targets' last ones: result 0, or
    /// `error` `ENOENT` (nothing to cancel) / `EALREADY`. io_uring_prep_cancel(3).
    #[pyo3(signature = (target_user_data, user_data, **sqe))]
    fn cancel(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = user_data_arg)] target_user_data: u64,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.queue_with(py, sqe, |r| r.cancel(target_user_data, user_data))
    }

    /// `link_timeout(seconds, user_data, *, link=False, ...)`: bounds the op queued just
    /// before it (queued with `link=True` or `hardlink=True`): if that op is still running
    /// after `seconds` it is cancelled (`ECANCELED`) and this completes with `ETIME`; if it
    /// completes first, this completes with `ECANCELED`. io_uring_prep_link_timeout(3).
    #[pyo3(signature = (seconds, user_data, **sqe))]
    fn link_timeout(
        &self,
        py: Python<'_>,
        seconds: f64,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let d = Seconds::wait("timeout").of(seconds)?;
        self.queue_with(py, sqe, |r| r.link_timeout(d, user_data))
    }

    /// `openat(path, flags, user_data, *, mode=0o777, dir_fd=None, ...)`: opens `path` as
    /// `os.open` does (always close-on-exec); the new fd is the completion's `result`, yours
    /// to close. io_uring_prep_openat(3).
    #[pyo3(signature = (path, flags, user_data, *, mode=0o777, dir_fd=None, **sqe))]
    fn openat(
        &self,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = i32_arg)] flags: i32,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] mode: u32,
        dir_fd: Option<Fd>,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let path = PathArg::extract(path)?.0.into_owned();
        let dir = dir_fd.map(Fd::borrow);
        self.queue_with(py, sqe, |r| r.openat(dir, path, flags, mode, user_data))
    }

    /// `statx(path, user_data, *, dir_fd=None, flags=0, mask=STATX_BASIC_STATS, ...)`: the
    /// file's metadata in the completion's `statx` (a dict). `flags` are `AT_*`
    /// (`AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH` with `path=""` for `dir_fd` itself).
    /// io_uring_prep_statx(3).
    #[pyo3(signature = (path, user_data, *, dir_fd=None, flags=0, mask=0x7ff, **sqe))]
    fn statx(
        &self,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        dir_fd: Option<Fd>,
        #[pyo3(from_py_with = i32_arg)] flags: i32,
        #[pyo3(from_py_with = u32_arg)] mask: u32,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let path = PathArg::extract(path)?.0.into_owned();
        let dir = dir_fd.map(Fd::borrow);
        self.queue_with(py, sqe, |r| r.statx(dir, path, flags, mask, user_data))
    }

    /// `fsync(fd, user_data, *, datasync=False, ...)`: fsync(2), or fdatasync(2) with
    /// `datasync`. io_uring_prep_fsync(3).
    #[pyo3(signature = (fd, user_data, *, datasync=false, fixed=false, **sqe))]
    fn fsync(
        &self,
        py: Python<'_>,
        fd: Fd,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        datasync: bool,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.queue_with(py, sqe, |r| r.fsync(tgt(fd, fixed), datasync, user_data))
    }

    /// `sendmsg(fd, buffers, user_data, *, address=None, flags=0, ...)`: sends the
    /// bytes-like objects in `buffers` as one message, to `address` when given (a datagram's
    /// destination, as `socket.sendmsg`'s). io_uring_prep_sendmsg(3).
    #[pyo3(signature = (fd, buffers, user_data, *, address=None, flags=0, fixed=false, **sqe))]
    fn sendmsg(
        &self,
        py: Python<'_>,
        fd: Fd,
        buffers: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        address: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = u32_arg)] flags: u32,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let mut parts: Vec<Box<dyn AsRef<[u8]> + Send>> = Vec::new();
        for item in buffers.try_iter()? {
            parts.push(Box::new(send_data(&item?)?));
        }
        let addr = match address {
            None => None,
            Some(a) if fixed => {
                // The family comes from the address itself for a fixed file.
                let _ = a;
                return Err(PyValueError::new_err(
                    "sendmsg with an address takes a plain fd (fixed=False)",
                ));
            }
            Some(a) => Some(crate::fd::addr::from_py(a, fd.borrow())?),
        };
        let flags = SendFlags::from_bits_retain(flags);
        self.queue_with(py, sqe, |r| {
            r.sendmsg(tgt(fd, fixed), parts, addr.as_ref(), flags, user_data)
        })
    }

    /// `recvmsg(fd, nbytes, user_data, *, flags=0, ...)`: up to `nbytes` bytes in the
    /// completion's `data`, the sender in its `address`. io_uring_prep_recvmsg(3).
    #[pyo3(signature = (fd, nbytes, user_data, *, flags=0, fixed=false, **sqe))]
    fn recvmsg(
        &self,
        py: Python<'_>,
        fd: Fd,
        nbytes: Count,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] flags: u32,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let n = args::nbytes(nbytes)?;
        let flags = RecvFlags::from_bits_retain(flags);
        self.queue_with(py, sqe, |r| r.recvmsg(tgt(fd, fixed), n, flags, user_data))
    }

    /// `register_files(fds)`: registers the fds (a sequence of ints; -1 leaves a slot empty)
    /// so ops can take `fixed=True` with an index into it as their fd. The kernel keeps its
    /// own reference: closing an fd later does not unregister it.
    /// io_uring_register_files(3).
    fn register_files(&self, py: Python<'_>, fds: Vec<i32>) -> PyResult<()> {
        self.detached(py, move |r| r.register_files(&fds).map_err(core_error))
    }

    /// `unregister_files()`: drops the registered files (ops in flight keep theirs).
    /// io_uring_unregister_files(3).
    fn unregister_files(&self, py: Python<'_>) -> PyResult<()> {
        self.detached(py, |r| r.unregister_files().map_err(core_error))
    }

    /// `register_buffers(count, size)`: `count` zeroed buffers of `size` bytes owned by the
    /// ring (at most 1 GiB in all) for `read_fixed`/`write_fixed`. Python never sees their
    /// memory: bytes are copied in (`fill_buffer`, `write_fixed(data=bytes)`) and out
    /// (`buffer_bytes`, a `read_fixed` completion's `data`). io_uring_register_buffers(3).
    fn register_buffers(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = u32_arg)] count: u32,
        #[pyo3(from_py_with = u32_arg)] size: u32,
    ) -> PyResult<()> {
        let count = u16::try_from(count)
            .ok()
            .filter(|&c| c > 0 && c <= 16384)
            .ok_or_else(|| {
                PyValueError::new_err(format!("count must be in 1..=16384, got {count}"))
            })?;
        self.detached(py, move |r| {
            r.register_buffers(count, size).map_err(core_error)
        })
    }

    /// `unregister_buffers()`: unregisters and frees the buffers; `OSError(EBUSY)` while an
    /// op using one is in flight. io_uring_unregister_buffers(3).
    fn unregister_buffers(&self, py: Python<'_>) -> PyResult<()> {
        self.detached(py, |r| r.unregister_buffers().map_err(core_error))
    }

    /// `fill_buffer(index, data, *, offset=0)`: copies `data` into registered buffer
    /// `index`; `OSError(EBUSY)` while an op using it is in flight.
    #[pyo3(signature = (index, data, *, offset=0))]
    fn fill_buffer(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = u16_arg)] index: u16,
        data: &Bound<'_, PyAny>,
        offset: usize,
    ) -> PyResult<()> {
        let data = send_data(data)?;
        let at = offset;
        self.queue(py, move |r| r.fill_fixed(index, at, data.as_ref()))
    }

    /// `buffer_bytes(index, nbytes=None, *, offset=0)`: a copy of registered buffer
    /// `index` (`nbytes` from `offset`; None: to its end); `OSError(EBUSY)` while an op
    /// using it is in flight.
    #[pyo3(signature = (index, nbytes=None, *, offset=0))]
    fn buffer_bytes<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = u16_arg)] index: u16,
        nbytes: Option<Count>,
        offset: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let start = offset;
        let n = nbytes.map(|n| usize::try_from(n.0).unwrap_or(usize::MAX));
        let bytes = self.with_ring(py, move |r| {
            let size = r.registered_buffers().map_or(0, |(_, s)| s as usize);
            let end = match n {
                None => size,
                Some(n) => start.saturating_add(n),
            };
            r.fixed_bytes(index, start..end.max(start))
                .map_err(core_error)
        })?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// `read_fixed(fd, buf_index, nbytes, user_data, *, offset=None, ...)`: up to `nbytes`
    /// bytes into registered buffer `buf_index`; the completion's `data` is a copy of them
    /// (they also stay in the buffer). io_uring_prep_read_fixed(3).
    #[pyo3(signature = (fd, buf_index, nbytes, user_data, *, offset=None, fixed=false, **sqe))]
    fn read_fixed(
        &self,
        py: Python<'_>,
        fd: Fd,
        #[pyo3(from_py_with = u16_arg)] buf_index: u16,
        nbytes: Count,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        offset: Option<Count>,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let n = args::nbytes(nbytes)?;
        let offset = offset.map(|o| o.0);
        self.queue_with(py, sqe, |r| {
            r.read_fixed(tgt(fd, fixed), buf_index, n, offset, user_data)
        })
    }

    /// `write_fixed(fd, buf_index, data, user_data, *, offset=None, ...)`: writes from
    /// registered buffer `buf_index`: `data` (bytes-like) is copied into it first, or an int
    /// `data` writes the buffer's first `data` bytes as they are (say, what a linked
    /// `read_fixed` put there). io_uring_prep_write_fixed(3).
    #[pyo3(signature = (fd, buf_index, data, user_data, *, offset=None, fixed=false, **sqe))]
    fn write_fixed(
        &self,
        py: Python<'_>,
        fd: Fd,
        #[pyo3(from_py_with = u16_arg)] buf_index: u16,
        data: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        offset: Option<Count>,
        fixed: bool,
        sqe: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let fl = sqe_flags(sqe)?;
        let offset = offset.map(|o| o.0);
        let copy_in = if data.is_instance_of::<pyo3::types::PyInt>() {
            None
        } else {
            Some(send_data(data)?)
        };
        let n = match &copy_in {
            Some(d) => d.as_ref().len(),
            None => args::nbytes(data.extract::<Count>()?)?,
        };
        self.queue(py, move |r| {
            if let Some(d) = &copy_in {
                r.fill_fixed(buf_index, 0, d.as_ref())?;
            }
            r.with_flags(fl, |r| {
                r.write_fixed(tgt(fd, fixed), buf_index, n, offset, user_data)
            })
        })
    }

    /// `submit()`: hands the queued ops to the kernel; returns how many it took.
    /// io_uring_submit(3).
    fn submit(&self, py: Python<'_>) -> PyResult<usize> {
        self.detached(py, |r| r.submit().map_err(core_error))
    }

    /// `wait(min_complete=1, timeout=None)`: submits what is queued, then waits until at least
    /// `min_complete` completions arrived, `timeout` seconds passed, or nothing is left in
    /// flight; returns every completion ready (maybe none: then `in_flight` tells whether
    /// the timeout passed or nothing was left to wait for; with `timeout_error=True` a timeout
    /// with nothing ready raises `TimeoutError` instead, so `[]` only ever means "nothing in
    /// flight"). The GIL is released while
    /// waiting; signal handlers run every 20 ms at most (Ctrl-C raises; completions already
    /// reaped stay for the next call). io_uring_submit_and_wait_timeout(3).
    #[pyo3(signature = (min_complete=1, timeout=None, *, timeout_error=false))]
    fn wait<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = u32_arg)] min_complete: u32,
        timeout: Option<f64>,
        timeout_error: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let min = min_complete as usize;
        let deadline = match timeout {
            None => None,
            Some(t) => Some(Instant::now() + Seconds::wait("timeout").of(t)?),
        };
        // One use for the whole wait: a close() from another thread is seen between slices.
        let cell = self.enter(py)?;
        let cell: &RingCell = &cell;
        loop {
            let slice = match deadline {
                // The closable model's slice (at most 20 ms): then the signal handlers run
                // and the closing flag is looked at.
                None => fdkit::fd::cancel_slice(),
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .min(fdkit::fd::cancel_slice()),
            };
            let closing = self.inner.closing_flag();
            let (ready, in_flight) = py.detach(|| {
                let mut guard = cell.lock();
                let Some(r) = guard.as_mut() else {
                    return Err(closed_ring());
                };
                if closing.load(Ordering::SeqCst) {
                    // Closed from another thread. With DEFER_TASKRUN only this thread (the
                    // issuer) can reap: tear the ring down here, properly, before leaving.
                    if r.defer_taskrun() {
                        drop(guard.take());
                    }
                    return Err(closed_ring());
                }
                match r.wait_ready(min, Some(slice)) {
                    Ok(n) => Ok((n, r.in_flight())),
                    Err(fdkit::Error::Os(Errno::INTR)) => Ok((r.ready(), r.in_flight())),
                    Err(e) => Err(core_error(e)),
                }
            })?;
            let expired = deadline.is_some_and(|d| Instant::now() >= d);
            if ready >= min || in_flight == 0 || expired {
                break;
            }
            py.check_signals()?;
        }
        let (done, in_flight) = match cell.lock().as_mut() {
            Some(r) => (r.take_ready(), r.in_flight()),
            None => return Err(closed_ring()),
        };
        if timeout_error && done.is_empty() && in_flight > 0 {
            return Err(pyo3::exceptions::PyTimeoutError::new_err(format!(
                "no completion within the timeout ({in_flight} ops in flight)"
            )));
        }
        let list = PyList::empty(py);
        for c in done {
            list.append(PyCompletion::from_core(py, c)?)?;
        }
        Ok(list)
    }

    /// The ring's fd (-1 once closed), as `Pipe.fileno()` and `AtomicPipe.fileno()`.
    fn fileno(&self, py: Python<'_>) -> i32 {
        self.inner
            .enter(py)
            .map_or(-1, |cell| cell.fd.load(Ordering::Relaxed))
    }

    /// The ring's fd: the older spelling of `fileno()`, kept as an alias.
    #[getter]
    fn fd(&self, py: Python<'_>) -> i32 {
        self.fileno(py)
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Whether the ring runs with `SINGLE_ISSUER|DEFER_TASKRUN`.
    #[getter]
    fn defer_taskrun(&self) -> bool {
        self.defer_taskrun
    }

    /// Submission queue size (as the kernel rounded it).
    #[getter]
    fn sq_entries(&self) -> u32 {
        self.sq_entries
    }

    /// Completion queue size (as the kernel rounded it).
    #[getter]
    fn cq_entries(&self) -> u32 {
        self.cq_entries
    }

    /// Ops queued or in flight whose last completion has not been reaped (0 once closed).
    #[getter]
    fn in_flight(&self, py: Python<'_>) -> usize {
        self.with_ring(py, |r| Ok(r.in_flight())).unwrap_or(0)
    }

    /// `close()`: cancels the ops in flight, waits (at most 2 s) for their completions,
    /// frees their buffers and closes the ring. From any thread: a `wait()` in another thread
    /// ends with ValueError within 20 ms, and the ring is freed once it has left. Closing
    /// twice is harmless.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.inner.close(py)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Closes the ring; returns None, so an exception in the block propagates.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.fileno(py) {
            -1 => "<Ring closed>".into(),
            fd => format!(
                "<Ring fd={fd} sq_entries={} cq_entries={} defer_taskrun={}>",
                self.sq_entries,
                self.cq_entries,
                if self.defer_taskrun { "True" } else { "False" }
            ),
        }
    }
}

impl Drop for PyRing {
    fn drop(&mut self) {
        // Garbage collection of an unclosed ring: the same bounded cancel-and-reap as close()
        // (no lock to wait for: we are the last reference).
        let ring = self
            .inner
            .get_mut()
            .ring
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(ring);
    }
}
