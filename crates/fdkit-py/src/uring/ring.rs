//! `Ring`: the core's safe io_uring for Python. Thin glue: arguments are checked and turned
//! into Rust values with the GIL held; the ring sits in a [`Closable`] (the binding's one
//! locking model, shared with `AtomicPipe` and `Pipe`: a close from any thread ends a `wait()`
//! in another with ValueError within a slice, and frees the ring only once it has left) and,
//! inside it, behind a `std::sync::Mutex` that is only ever waited for with the GIL released
//! (a `try_lock` first, which never blocks); waits run with the GIL released in bounded
//! slices, with Python's signal handlers run and the closing flag checked in between.

use super::args::{self, send_data, user_data_arg};
use super::completion::PyCompletion;
use crate::args::{i32_arg, u16_arg, u32_arg, Count, Fd, Seconds};
use crate::closable::{Closable, Release, Use};
use crate::errors::core_error;
use crate::gil::without_gil;
use fdkit::fd::Errno;
use fdkit::uring::{Ring, RingOptions};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use rustix::event::PollFlags;
use rustix::net::SocketType;
use rustix::net::{AddressFamily, Protocol, RecvFlags, SendFlags, Shutdown, SocketFlags};
use rustix::pipe::SpliceFlags;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Instant;

/// Why a call on the ring failed before reaching Python.
enum Fail {
    Closed,
    Core(fdkit::Error),
}

impl From<fdkit::Error> for Fail {
    fn from(e: fdkit::Error) -> Self {
        Fail::Core(e)
    }
}

impl From<Fail> for PyErr {
    fn from(f: Fail) -> PyErr {
        match f {
            Fail::Closed => PyValueError::new_err("I/O operation on a closed Ring"),
            Fail::Core(e) => core_error(e),
        }
    }
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
    /// Starts a use of the ring (see `closable`), or `Fail::Closed`.
    fn enter<'py>(&self, py: Python<'py>) -> Result<Use<'_, 'py, RingCell>, Fail> {
        self.inner.enter(py).ok_or(Fail::Closed)
    }

    /// Runs `f` on the open ring: with the GIL held when the mutex is free, else with the GIL
    /// released while waiting for it (a `wait()` holds it for one slice at most).
    fn with_ring<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Ring) -> Result<T, Fail> + Send,
    ) -> Result<T, Fail> {
        let cell = self.enter(py)?;
        let cell: &RingCell = &cell;
        let run = |mut guard: MutexGuard<'_, Option<Ring>>| match guard.as_mut() {
            Some(ring) => f(ring),
            None => Err(Fail::Closed),
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
        f: impl FnOnce(&mut Ring) -> Result<T, Fail> + Send,
    ) -> Result<T, Fail> {
        let cell = self.enter(py)?;
        let cell: &RingCell = &cell;
        py.detach(|| match cell.lock().as_mut() {
            Some(ring) => f(ring),
            None => Err(Fail::Closed),
        })
    }

    /// Queues one op (no kernel entry unless the submission queue is full).
    fn queue(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Ring) -> fdkit::error::Result<()> + Send,
    ) -> PyResult<()> {
        Ok(self.with_ring(py, |ring| f(ring).map_err(Fail::Core))?)
    }
}

#[pymethods]
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
    fn nop(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
    ) -> PyResult<()> {
        self.queue(py, |r| r.nop(user_data))
    }

    /// `socket(family, type, user_data, *, proto=0)`: a new socket (close-on-exec; `type` may
    /// include `SOCK_NONBLOCK`); its fd is the completion's `result`, yours to close.
    /// io_uring_prep_socket(3).
    #[pyo3(signature = (family, r#type, user_data, *, proto=0))]
    fn socket(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = u32_arg)] family: u32,
        #[pyo3(from_py_with = u32_arg)] r#type: u32,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] proto: u32,
    ) -> PyResult<()> {
        let family = u16::try_from(family)
            .map(AddressFamily::from_raw)
            .map_err(|_| PyValueError::new_err(format!("invalid address family {family}")))?;
        let type_flags = (SocketFlags::NONBLOCK | SocketFlags::CLOEXEC).bits();
        let flags = SocketFlags::from_bits_retain(r#type & type_flags);
        let ty = SocketType::from_raw(r#type & !type_flags);
        let proto = std::num::NonZeroU32::new(proto).map(Protocol::from_raw);
        self.queue(py, |r| r.socket(family, ty, flags, proto, user_data))
    }

    /// `accept(fd, user_data, *, multishot=False)`: a connection from listener `fd`
    /// (close-on-exec); its fd is the completion's `result`, yours to close. With `multishot`,
    /// one completion per connection (`more` while armed). io_uring_prep_accept(3),
    /// io_uring_prep_multishot_accept(3).
    #[pyo3(signature = (fd, user_data, *, multishot=false))]
    fn accept(
        &self,
        py: Python<'_>,
        fd: Fd,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        multishot: bool,
    ) -> PyResult<()> {
        if multishot {
            self.queue(py, |r| r.accept_multishot(fd.borrow(), user_data))
        } else {
            self.queue(py, |r| r.accept(fd.borrow(), user_data))
        }
    }

    /// `connect(fd, address, user_data)`: `address` as for `socket.connect` (a `(host, port)`
    /// tuple, or a path for AF_UNIX). io_uring_prep_connect(3).
    fn connect(
        &self,
        py: Python<'_>,
        fd: Fd,
        address: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
    ) -> PyResult<()> {
        let addr = crate::fd::addr::from_py(address, fd.borrow())?;
        self.queue(py, |r| r.connect(fd.borrow(), &addr, user_data))
    }

    /// `recv(fd, nbytes, user_data, *, flags=0)`: up to `nbytes` bytes, in the completion's
    /// `data`. io_uring_prep_recv(3).
    #[pyo3(signature = (fd, nbytes, user_data, *, flags=0))]
    fn recv(
        &self,
        py: Python<'_>,
        fd: Fd,
        nbytes: Count,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] flags: u32,
    ) -> PyResult<()> {
        let n = args::nbytes(nbytes)?;
        let flags = RecvFlags::from_bits_retain(flags);
        self.queue(py, |r| r.recv(fd.borrow(), n, flags, user_data))
    }

    /// `recv_multishot(fd, group, user_data)`: receives into buffer group `group` (see
    /// `provide_buffers`) until cancelled, end of stream (`result` 0) or an error: one
    /// completion per chunk, `more` while armed. `ENOBUFS` in `error` means the group ran dry;
    /// queue the receive again, no data is lost. io_uring_prep_recv_multishot(3).
    fn recv_multishot(
        &self,
        py: Python<'_>,
        fd: Fd,
        #[pyo3(from_py_with = u16_arg)] group: u16,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
    ) -> PyResult<()> {
        self.queue(py, |r| r.recv_multishot(fd.borrow(), group, user_data))
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
        Ok(self.detached(py, |r| {
            r.provide_buffers(group, count, size).map_err(Fail::Core)
        })?)
    }

    /// `send(fd, data, user_data, *, flags=0)`: sends `data` (any bytes-like object; `bytes`
    /// are kept by reference, others copied). io_uring_prep_send(3).
    #[pyo3(signature = (fd, data, user_data, *, flags=0))]
    fn send(
        &self,
        py: Python<'_>,
        fd: Fd,
        data: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] flags: u32,
    ) -> PyResult<()> {
        let data = send_data(data)?;
        let flags = SendFlags::from_bits_retain(flags);
        self.queue(py, |r| r.send(fd.borrow(), data, flags, user_data))
    }

    /// `send_zc(fd, data, user_data, *, flags=0)`: a zero-copy send; two completions: the
    /// result (`more` set) and then the notification (`notif` set) once the kernel is done
    /// with `data`. io_uring_prep_send_zc(3).
    #[pyo3(signature = (fd, data, user_data, *, flags=0))]
    fn send_zc(
        &self,
        py: Python<'_>,
        fd: Fd,
        data: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] flags: u32,
    ) -> PyResult<()> {
        let data = send_data(data)?;
        let flags = SendFlags::from_bits_retain(flags);
        self.queue(py, |r| r.send_zc(fd.borrow(), data, flags, user_data))
    }

    /// `read(fd, nbytes, user_data, *, offset=None)`: up to `nbytes` bytes at `offset` (None:
    /// the file position), in the completion's `data`. io_uring_prep_read(3).
    #[pyo3(signature = (fd, nbytes, user_data, *, offset=None))]
    fn read(
        &self,
        py: Python<'_>,
        fd: Fd,
        nbytes: Count,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        offset: Option<Count>,
    ) -> PyResult<()> {
        let n = args::nbytes(nbytes)?;
        let offset = offset.map(|o| o.0);
        self.queue(py, |r| r.read(fd.borrow(), n, offset, user_data))
    }

    /// `write(fd, data, user_data, *, offset=None)`: writes `data` at `offset` (None: the file
    /// position). io_uring_prep_write(3).
    #[pyo3(signature = (fd, data, user_data, *, offset=None))]
    fn write(
        &self,
        py: Python<'_>,
        fd: Fd,
        data: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        offset: Option<Count>,
    ) -> PyResult<()> {
        let data = send_data(data)?;
        let offset = offset.map(|o| o.0);
        self.queue(py, |r| r.write(fd.borrow(), data, offset, user_data))
    }

    /// `splice(fd_in, fd_out, nbytes, user_data, *, off_in=None, off_out=None, flags=0)`: moves
    /// up to `nbytes` bytes between two fds, one of them a pipe. io_uring_prep_splice(3).
    #[pyo3(signature = (fd_in, fd_out, nbytes, user_data, *, off_in=None, off_out=None, flags=0))]
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
    ) -> PyResult<()> {
        let flags = SpliceFlags::from_bits_retain(flags);
        let (oi, oo) = (off_in.map(|o| o.0), off_out.map(|o| o.0));
        self.queue(py, |r| {
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
    #[pyo3(signature = (fd_in, fd_out, nbytes, user_data, *, flags=0))]
    fn tee(
        &self,
        py: Python<'_>,
        fd_in: Fd,
        fd_out: Fd,
        #[pyo3(from_py_with = u32_arg)] nbytes: u32,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] flags: u32,
    ) -> PyResult<()> {
        let flags = SpliceFlags::from_bits_retain(flags);
        self.queue(py, |r| {
            r.tee(fd_in.borrow(), fd_out.borrow(), nbytes, flags, user_data)
        })
    }

    /// `shutdown(fd, how, user_data)`: `how` is `socket.SHUT_RD`, `SHUT_WR` or `SHUT_RDWR`.
    /// io_uring_prep_shutdown(3).
    fn shutdown(
        &self,
        py: Python<'_>,
        fd: Fd,
        #[pyo3(from_py_with = i32_arg)] how: i32,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
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
        self.queue(py, |r| r.shutdown(fd.borrow(), how, user_data))
    }

    /// `close_fd(fd, user_data)`: closes `fd` through the ring (the fd is the ring's from
    /// now on; if queueing fails it is left open and the error raised).
    /// io_uring_prep_close(3).
    fn close_fd(
        &self,
        py: Python<'_>,
        fd: Fd,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
    ) -> PyResult<()> {
        Ok(self.with_ring(py, |r| {
            // SAFETY: the Python caller hands this fd number over to be closed, as with
            // `os.close`; if queueing fails it is given back below without being closed.
            let owned = unsafe { OwnedFd::from_raw_fd(fd.0) };
            r.close_fd(owned, user_data).map_err(|(e, owned)| {
                let _ = owned.into_raw_fd();
                Fail::Core(e)
            })
        })?)
    }

    /// `poll_add(fd, events, user_data, *, multishot=False)`: completes with the ready events
    /// (`select.POLLIN`…) in `result`. io_uring_prep_poll_add(3).
    #[pyo3(signature = (fd, events, user_data, *, multishot=false))]
    fn poll_add(
        &self,
        py: Python<'_>,
        fd: Fd,
        #[pyo3(from_py_with = u32_arg)] events: u32,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        multishot: bool,
    ) -> PyResult<()> {
        let events = u16::try_from(events)
            .map(PollFlags::from_bits_retain)
            .map_err(|_| PyValueError::new_err(format!("events out of range: {events}")))?;
        self.queue(py, |r| {
            r.poll_add(fd.borrow(), events, multishot, user_data)
        })
    }

    /// `timeout(seconds, user_data, *, count=0)`: completes with `error` `ETIME` after
    /// `seconds`, or with result 0 once `count` other completions arrived (`count` 0: time
    /// only). io_uring_prep_timeout(3).
    #[pyo3(signature = (seconds, user_data, *, count=0))]
    fn timeout(
        &self,
        py: Python<'_>,
        seconds: f64,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
        #[pyo3(from_py_with = u32_arg)] count: u32,
    ) -> PyResult<()> {
        let d = Seconds::wait("timeout").of(seconds)?;
        self.queue(py, |r| r.timeout(d, count, user_data))
    }

    /// `cancel(target_user_data, user_data)`: cancels every op in flight with user_data
    /// `target_user_data`. Its completion comes after the targets' last ones: result 0, or
    /// `error` `ENOENT` (nothing to cancel) / `EALREADY`. io_uring_prep_cancel(3).
    fn cancel(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = user_data_arg)] target_user_data: u64,
        #[pyo3(from_py_with = user_data_arg)] user_data: u64,
    ) -> PyResult<()> {
        self.queue(py, |r| r.cancel(target_user_data, user_data))
    }

    /// `submit()`: hands the queued ops to the kernel; returns how many it took.
    /// io_uring_submit(3).
    fn submit(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.detached(py, |r| r.submit().map_err(Fail::Core))?)
    }

    /// `wait(min_complete=1, timeout=None)`: submits what is queued, then waits until at least
    /// `min_complete` completions arrived, `timeout` seconds passed, or nothing is left in
    /// flight; returns every completion ready (maybe none). The GIL is released while
    /// waiting; signal handlers run every 20 ms at most (Ctrl-C raises; completions already
    /// reaped stay for the next call). io_uring_submit_and_wait_timeout(3).
    #[pyo3(signature = (min_complete=1, timeout=None))]
    fn wait<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = u32_arg)] min_complete: u32,
        timeout: Option<f64>,
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
                    return Err(Fail::Closed);
                };
                if closing.load(Ordering::SeqCst) {
                    // Closed from another thread. With DEFER_TASKRUN only this thread (the
                    // issuer) can reap: tear the ring down here, properly, before leaving.
                    if r.defer_taskrun() {
                        drop(guard.take());
                    }
                    return Err(Fail::Closed);
                }
                match r.wait_ready(min, Some(slice)) {
                    Ok(n) => Ok((n, r.in_flight())),
                    Err(fdkit::Error::Os(Errno::INTR)) => Ok((r.ready(), r.in_flight())),
                    Err(e) => Err(Fail::Core(e)),
                }
            })?;
            let expired = deadline.is_some_and(|d| Instant::now() >= d);
            if ready >= min || in_flight == 0 || expired {
                break;
            }
            py.check_signals()?;
        }
        let done = match cell.lock().as_mut() {
            Some(r) => r.take_ready(),
            None => return Err(Fail::Closed.into()),
        };
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
