//! `zerocopy.Pipe`: a pipe pair as an object (`read_from`, `write_to`, `tee`, its size),
//! closable from any thread (see `closable`). See pipe(7), splice(2), tee(2).

use crate::args::{Count, Fd};
use crate::closable::{closed_error, Closable, Release, Use};
use crate::errors::os_error;
use crate::gil::{interrupted, retry_eintr};
use crate::pipe_size::pipe_size;
use fdkit::fd::Errno;
use fdkit::zerocopy::{self, Mirror, Pipe, WriteProgress};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;
use rustix::pipe::{PipeFlags, SpliceFlags};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

/// A pipe pair as an object: `read_from`, `write_to`, `tee`, sizes. A context manager; after
/// `close()` every method raises `ValueError`. Closable from any thread (the binding's one
/// locking model, see `closable`): a call waiting in another thread ends with ValueError within
/// 20 ms, and the fds are closed once it has left.
#[pyclass(module = "fdkit._fdkit", name = "Pipe", frozen)]
pub struct PyPipe {
    pipe: Closable<Option<Pipe>>,
    /// The standing tee: where `write_to` copies every chunk first.
    mirrors: Mutex<Vec<MirrorEntry>>,
}

/// One mirror: its target and the private pipe each chunk goes through.
struct MirrorEntry {
    target: Target,
    via: Arc<Pipe>,
}

enum Target {
    /// A raw fd, the caller's (it must stay open while mirrored).
    Fd(i32),
    /// Another `Pipe`: its write end (kept open for the call by a use).
    Pipe(Py<PyPipe>),
}

impl Release for Option<Pipe> {
    fn release(&mut self, _py: Python<'_>, _deferred: bool) -> PyResult<()> {
        drop(self.take());
        Ok(())
    }

    fn is_released(&self) -> bool {
        self.is_none()
    }
}

fn closed_pipe() -> PyErr {
    closed_error("Pipe")
}

/// Runs a cancellable splice/tee with the GIL released; after `EINTR` runs Python's signal
/// handlers and tries again (nothing moved); `ECANCELED` (a close from another thread) is the
/// closed error.
fn splice_call(
    py: Python<'_>,
    mut call: impl FnMut(&mut dyn FnMut() -> Result<(), Errno>) -> Result<usize, Errno> + Send,
) -> PyResult<usize> {
    match retry_eintr(py, || call(&mut interrupted))? {
        Err(Errno::CANCELED) => Err(closed_pipe()),
        other => other.map_err(os_error),
    }
}

impl PyPipe {
    /// Starts a use (see `closable`) of the open pipe, or the closed error.
    fn enter<'py>(&self, py: Python<'py>) -> PyResult<Use<'_, 'py, Option<Pipe>>> {
        self.pipe
            .enter(py)
            .filter(|p| p.is_some())
            .ok_or_else(closed_pipe)
    }

    /// Runs `f` on the open pipe.
    fn with<T>(&self, py: Python<'_>, f: impl FnOnce(&Pipe) -> PyResult<T>) -> PyResult<T> {
        let pipe = self.enter(py)?;
        f(pipe.as_ref().expect("enter checked"))
    }

    fn mirror_list(&self) -> MutexGuard<'_, Vec<MirrorEntry>> {
        self.mirrors.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn need_write_end(pipe: &Pipe) -> PyResult<()> {
        if pipe.is_write_closed() {
            return Err(PyValueError::new_err(
                "the Pipe's write end is closed (close_write())",
            ));
        }
        Ok(())
    }

    /// Moves bytes out (single chunk with `n`, else to the pipe's end), through the mirrors.
    fn write_out(
        &self,
        py: Python<'_>,
        fd: Fd,
        n: Option<u64>,
        offset: Option<Count>,
    ) -> PyResult<u64> {
        let entries: Vec<(Option<Bound<'_, PyPipe>>, i32, Arc<Pipe>)> = self
            .mirror_list()
            .iter()
            .map(|e| match &e.target {
                Target::Fd(fd) => (None, *fd, Arc::clone(&e.via)),
                Target::Pipe(p) => (Some(p.bind(py).clone()), -1, Arc::clone(&e.via)),
            })
            .collect();
        let mut uses = Vec::new();
        for (target, _, _) in &entries {
            uses.push(match target {
                Some(p) => Some(p.get().enter(py)?),
                None => None,
            });
        }
        let mut flags: Vec<&AtomicBool> = vec![self.pipe.closing_flag()];
        let mut mirrors = Vec::new();
        for ((target, raw, via), used) in entries.iter().zip(&uses) {
            let fd = match (target, used) {
                (Some(p), Some(u)) => {
                    flags.push(p.get().pipe.closing_flag());
                    u.as_ref().expect("enter checked").write_end()
                }
                // SAFETY: the caller gave this fd to add_mirror and keeps it open while it
                // is mirrored (documented), as with every fd passed as an int.
                _ => unsafe { BorrowedFd::borrow_raw(*raw) },
            };
            mirrors.push(Mirror {
                fd,
                via: via.as_ref(),
            });
        }
        self.with(py, |pipe| {
            let mut off = offset.map(|o| o.0);
            let mut progress = WriteProgress::default();
            let once = n.is_some();
            let r = retry_eintr(py, || {
                pipe.write_to_all(
                    fd.borrow(),
                    off.as_mut(),
                    n,
                    once,
                    &mirrors,
                    &mut progress,
                    &flags,
                    &mut interrupted,
                )
            })?;
            match r {
                Err(Errno::CANCELED) => Err(closed_pipe()),
                other => other.map_err(os_error),
            }
        })
    }
}

#[pymethods]
impl PyPipe {
    /// `Pipe(size=None, *, nonblocking=False)`: `pipe2(O_CLOEXEC)`, resized to `size` bytes
    /// when given.
    #[new]
    #[pyo3(signature = (size=None, *, nonblocking=false))]
    fn new(size: Option<Count>, nonblocking: bool) -> PyResult<Self> {
        let flags = if nonblocking {
            PipeFlags::NONBLOCK
        } else {
            PipeFlags::empty()
        };
        let pipe = Pipe::new(flags).map_err(os_error)?;
        if let Some(size) = size {
            pipe.resize(size.clamped()).map_err(os_error)?;
        }
        Ok(PyPipe {
            pipe: Closable::new(Some(pipe)),
            mirrors: Mutex::new(Vec::new()),
        })
    }

    /// `splice(fd → pipe)`: up to `n` bytes from `fd` (at `offset` when given); 0 at EOF.
    /// `n=None`: until `fd` ends (Go zerocopy's `ReadFrom`), read/write for an fd that refuses
    /// splice, waiting on non-blocking fds; someone must drain the pipe meanwhile unless what
    /// comes fits. Returns the bytes moved.
    #[pyo3(signature = (fd, n=None, *, offset=None))]
    fn read_from(
        &self,
        py: Python<'_>,
        fd: Fd,
        n: Option<Count>,
        offset: Option<Count>,
    ) -> PyResult<u64> {
        let closing: &AtomicBool = self.pipe.closing_flag();
        let Some(n) = n else {
            return self.with(py, |pipe| {
                Self::need_write_end(pipe)?;
                let mut off = offset.map(|o| o.0);
                let mut moved = 0;
                let r = retry_eintr(py, || {
                    pipe.read_from_all(
                        fd.borrow(),
                        off.as_mut(),
                        None,
                        &mut moved,
                        &[closing],
                        &mut interrupted,
                    )
                })?;
                match r {
                    Err(Errno::CANCELED) => Err(closed_pipe()),
                    other => other.map_err(os_error),
                }
            });
        };
        self.with(py, |pipe| {
            Self::need_write_end(pipe)?;
            let mut off = offset.map(|o| o.0);
            splice_call(py, |cp| {
                let flags = SpliceFlags::MOVE;
                pipe.read_from_cancellable(
                    fd.borrow(),
                    off.as_mut(),
                    n.clamped(),
                    flags,
                    &[closing],
                    cp,
                )
            })
            .map(|n| n as u64)
        })
    }

    /// `splice(pipe → fd)`: up to `n` bytes out of the pipe into `fd` (at `offset` when given).
    /// `n=None`: until the pipe ends (`close_write()`, then drained; Go zerocopy's `WriteTo`),
    /// read/write for an fd that refuses splice, waiting on non-blocking fds. With mirrors
    /// (`add_mirror`), every chunk is copied to each of them before it leaves. Returns the
    /// bytes moved.
    #[pyo3(signature = (fd, n=None, *, offset=None))]
    fn write_to(
        &self,
        py: Python<'_>,
        fd: Fd,
        n: Option<Count>,
        offset: Option<Count>,
    ) -> PyResult<u64> {
        let mirrored = !self.mirror_list().is_empty();
        let n = match n {
            Some(n) if !mirrored => n,
            n => return self.write_out(py, fd, n.map(|n| n.0), offset),
        };
        let closing: &AtomicBool = self.pipe.closing_flag();
        self.with(py, |pipe| {
            let mut off = offset.map(|o| o.0);
            splice_call(py, |cp| {
                let flags = SpliceFlags::MOVE;
                pipe.write_to_cancellable(
                    fd.borrow(),
                    off.as_mut(),
                    n.clamped(),
                    flags,
                    &[closing],
                    cp,
                )
            })
            .map(|n| n as u64)
        })
    }

    /// `tee(pipe → other)`: duplicates up to `n` bytes into `other` without consuming them.
    fn tee(&self, py: Python<'_>, other: PyRef<'_, PyPipe>, n: Count) -> PyResult<usize> {
        let flags: [&AtomicBool; 2] = [self.pipe.closing_flag(), other.pipe.closing_flag()];
        let other_use = other.enter(py)?;
        let other_pipe = other_use.as_ref().expect("enter checked");
        self.with(py, |pipe| {
            splice_call(py, |cp| {
                pipe.tee_cancellable(other_pipe, n.clamped(), SpliceFlags::empty(), &flags, cp)
            })
        })
    }

    /// Half-close: the pipe loses its writer, so a consumer sees end of file once it has taken
    /// what is in it (`write_to(fd)` returns, a reader of `fileno()` reads b''), while this
    /// object and its read end live. Later writes into the pipe raise ValueError. Closing twice
    /// is harmless. See pipe(7).
    fn close_write(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |p| p.close_write().map_err(os_error))
    }

    /// Adds a standing tee: from now on every chunk `write_to` takes out of this pipe is first
    /// copied, whole, to `target` (an fd open for writing: a file, a socket, a pipe; or a
    /// `Pipe`, into its write end), waiting as long as it needs. An int fd stays the caller's
    /// and must stay open while mirrored. One consumer at a time: bytes read from `fileno()`
    /// directly are not mirrored.
    fn add_mirror(slf: &Bound<'_, Self>, target: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let target = if let Ok(p) = target.cast::<PyPipe>() {
            if p.is(slf) {
                return Err(PyValueError::new_err("a Pipe cannot mirror into itself"));
            }
            p.get().enter(py)?;
            Target::Pipe(p.clone().unbind())
        } else if let Ok(fd) = target.extract::<Fd>() {
            fdkit::fd::get_blocking(fd.borrow()).map_err(os_error)?; // EBADF now, not later
            Target::Fd(fd.0)
        } else {
            return Err(PyTypeError::new_err(format!(
                "add_mirror takes a Pipe or an fd (int), not {}",
                crate::args::type_name(target)
            )));
        };
        let size = this.with(py, |p| p.size().map_err(os_error))?;
        let via = Pipe::new(PipeFlags::NONBLOCK).map_err(os_error)?;
        via.resize_or_max(size).map_err(os_error)?;
        this.mirror_list().push(MirrorEntry {
            target,
            via: Arc::new(via),
        });
        Ok(())
    }

    /// Removes a mirror (the same Pipe object, or the same fd); ValueError when not mirrored.
    fn remove_mirror(&self, py: Python<'_>, target: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut list = self.mirror_list();
        let at = list.iter().position(|e| match &e.target {
            Target::Pipe(p) => p.bind(py).is(target),
            Target::Fd(fd) => target.extract::<i32>().is_ok_and(|t| t == *fd),
        });
        match at {
            Some(i) => {
                list.remove(i);
                Ok(())
            }
            None => Err(PyValueError::new_err("not a mirror of this Pipe")),
        }
    }

    /// The mirrors, in the order they get each chunk (Pipes and ints).
    #[getter]
    fn mirrors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for e in self.mirror_list().iter() {
            match &e.target {
                Target::Pipe(p) => list.append(p.bind(py))?,
                Target::Fd(fd) => list.append(*fd)?,
            }
        }
        Ok(list)
    }

    /// The capacity in bytes (`F_GETPIPE_SZ`). An int; calling it (`size()`, as
    /// `AtomicPipe` once spelled it) gives the same number.
    #[getter]
    fn size<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let n = self.with(py, |p| p.size().map_err(os_error))?;
        pipe_size(py, n)
    }

    /// Resizes to at least `size` bytes (`F_SETPIPE_SZ`); returns the size set.
    fn resize(&self, py: Python<'_>, size: Count) -> PyResult<usize> {
        self.with(py, |p| p.resize(size.clamped()).map_err(os_error))
    }

    /// `/proc/sys/fs/pipe-max-size`: the most an unprivileged process may ask for (an int,
    /// callable like `size`).
    #[getter]
    fn max_size<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let n = self.with(py, |_| zerocopy::pipe_max_size().map_err(os_error))?;
        pipe_size(py, n)
    }

    /// Resizes to `size`, or to `max_size` when `size` is not allowed; returns the size set.
    fn resize_or_max(&self, py: Python<'_>, size: Count) -> PyResult<usize> {
        self.with(py, |p| p.resize_or_max(size.clamped()).map_err(os_error))
    }

    /// Bytes waiting in the pipe (`FIONREAD`).
    #[getter]
    fn pending(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |p| p.pending().map_err(os_error))
    }

    /// `(read_fd, write_fd)`; the Pipe still owns them.
    #[getter]
    fn fds(&self, py: Python<'_>) -> PyResult<(i32, i32)> {
        self.with(py, |p| {
            let write = if p.is_write_closed() {
                -1
            } else {
                p.write_end().as_raw_fd()
            };
            Ok((p.read_end().as_raw_fd(), write))
        })
    }

    /// The read end's fd (what `select`/`poll` watch for bytes to take out), or -1 once
    /// closed, as `Ring.fileno()` and `AtomicPipe.fileno()`; `fds` gives both ends. The Pipe
    /// still owns it.
    fn fileno(&self, py: Python<'_>) -> i32 {
        self.fds(py).map_or(-1, |(r, _)| r)
    }

    /// Whether `close()` was called (in any thread).
    #[getter]
    fn closed(&self) -> bool {
        self.pipe.is_closed()
    }

    /// Closes both ends (and forgets the mirrors), from any thread; closing twice is harmless.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.pipe.close(py)?;
        let dropped = std::mem::take(&mut *self.mirror_list());
        drop(dropped);
        Ok(())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Closes the pipe; returns None, so an exception in the block propagates.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.fds(py) {
            Ok((r, w)) => format!("<Pipe read={r} write={w}>"),
            Err(_) => "<Pipe closed>".into(),
        }
    }
}
