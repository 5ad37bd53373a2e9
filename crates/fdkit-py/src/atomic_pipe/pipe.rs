//! `AtomicPipe`: Perl Atomic::Pipe's API over the core's `MessageWriter`/`MessageReader`.
//!
//! Threads: the object is `frozen`; its end sits in a [`Closable`] (the binding's one locking
//! model, shared with `Pipe` and `Ring`: close from any thread ends the other threads' waits
//! with ValueError and releases the fd only after they left) and, inside it, behind a fork-safe
//! mutex, so one pipe may be shared by threads. The rule that keeps this deadlock-free: nobody
//! ever *waits* for the mutex while holding the GIL (the lock only tries, and waits with the
//! GIL released, in slices with the signal handlers run between).
//!
//! Signals: syscalls run with the GIL released by the bare C API (cheap enough for a
//! 100-byte message per call); the core's checkpoint only reports `EINTR`, and the loop
//! (`state::retry`) runs Python's signal handlers with the GIL back, then resumes the same
//! operation. Every operation is resumable: the writer's queue and the reader's decoder keep
//! their state, and a deadline is absolute.

use super::fork_safe_lock::{ForkSafe, Held};
use super::options::{compression, Options};
use super::read::{event_tuple, message_object, read_wait, Next, Patience};
use super::state::{
    apply_compression, build_state, closed, fd_of, is_closed, mode_of, read_error, retry,
    set_mixed, End, Ends, Recipe, State,
};
use super::TIMEOUT;
use crate::args::{ByteArg, Count, Fd, PathArg};
use crate::closable::{Closable, Use};
use crate::errors::{os_error, os_error_with_path};
use crate::gil::{interrupted, retry_eintr, without_gil};
use crate::pipe_size::pipe_size;
use fdkit::atomic_pipe::{
    BurstError, Event, MessageReader, MessageWriter, Mode, ReadError, Wait, Writer, PIPE_BUF,
};
use fdkit::fd::{Errno, OFlags};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// Many writers, one pipe, whole messages: Perl Atomic::Pipe's wire format and API.
/// See `docs/atomic_pipe_api.md` and pipe(7) on `PIPE_BUF` atomicity.
#[pyclass(name = "AtomicPipe", module = "fdkit._fdkit", frozen)]
pub struct AtomicPipe {
    ends: Closable<Ends>,
    writer: bool,
}

impl AtomicPipe {
    fn from_owned(fd: OwnedFd, writer: bool, options: &Options) -> PyResult<Self> {
        let raw = fd.as_raw_fd();
        let closing = Arc::new(AtomicBool::new(false));
        let state = build_state(fd, writer, options, &closing)?;
        let ends = Ends {
            state: ForkSafe::new(state),
            writer,
            recipe: Mutex::new(Recipe {
                fd: raw,
                options: options.clone(),
            }),
            closing: Arc::clone(&closing),
        };
        Ok(AtomicPipe {
            ends: Closable::with_flag(ends, closing),
            writer,
        })
    }

    /// Starts a use (see `closable`), or the closed error.
    fn enter<'py>(&self, py: Python<'py>) -> PyResult<Use<'_, 'py, Ends>> {
        self.ends.enter(py).ok_or_else(closed)
    }

    /// Starts a use and takes the end's lock; a close() that began meanwhile wins.
    fn lock<'a, 'py>(&'a self, py: Python<'py>) -> PyResult<(Use<'a, 'py, Ends>, Held<State>)> {
        let ends = self.enter(py)?;
        let held = ends.lock(py)?;
        if ends.closing() {
            return Err(closed());
        }
        Ok((ends, held))
    }

    /// The recipe, open or closed (None only while a close() is releasing the end).
    fn with_recipe<T>(&self, py: Python<'_>, f: impl FnOnce(&Recipe) -> T) -> Option<T> {
        match self.ends.enter(py) {
            Some(ends) => Some(f(&ends.recipe())),
            None => self.ends.released().map(|ends| f(&ends.recipe())),
        }
    }

    fn open_fifo(py: Python<'_>, path: &Bound<'_, PyAny>, flags: OFlags) -> PyResult<OwnedFd> {
        let p = PathArg::extract(path)?;
        let cpath: &CStr = &p.0;
        // Opening a FIFO waits for the other end: a peer-waiting call, so the GIL goes.
        let flags = flags | OFlags::CLOEXEC;
        retry_eintr(py, || {
            fdkit::fd::open(cpath, flags, fdkit::fd::Mode::empty())
        })?
        .map_err(|e| os_error_with_path(e, path))
    }

    fn with_writer<T: Send>(
        &self,
        py: Python<'_>,
        op: impl FnMut(&mut MessageWriter) -> Result<T, Errno> + Send,
    ) -> PyResult<T> {
        let (_ends, mut guard) = self.lock(py)?;
        let state: &mut State = &mut guard;
        let mut op = op;
        let r = retry(
            py,
            state,
            |s| match &mut s.end {
                End::Writer(w) if w.is_closed() => Err(Errno::BADF),
                End::Writer(w) => op(w),
                End::Reader(_) => Err(Errno::BADF),
            },
            |e| *e == Errno::INTR,
        )?;
        r.map_err(|e| self.map_errno(state, e))
    }

    /// Encodes into the writer's queue once (`queue`), then writes the queue as the fd's mode
    /// allows; an `EINTR` resumes the writing, never the queueing (which would duplicate).
    fn queue_then_flush<T: Send>(
        &self,
        py: Python<'_>,
        queue: impl FnOnce(&mut MessageWriter) -> Result<T, Errno> + Send,
    ) -> PyResult<T> {
        let mut queue = Some(queue);
        let mut queued = None;
        self.with_writer(py, |w| {
            if let Some(queue) = queue.take() {
                queued = Some(queue(w)?);
            }
            w.flush_default(&mut interrupted)
        })?;
        Ok(queued.expect("the first attempt queues or fails"))
    }

    fn map_errno(&self, state: &State, e: Errno) -> PyErr {
        if e == Errno::CANCELED || (e == Errno::BADF && is_closed(state)) {
            closed()
        } else {
            os_error(e)
        }
    }

    fn need_writer(&self) -> PyResult<()> {
        if self.writer {
            Ok(())
        } else {
            Err(PyValueError::new_err(
                "this AtomicPipe is the reading end: it cannot write",
            ))
        }
    }

    fn need_reader(&self) -> PyResult<()> {
        if self.writer {
            Err(PyValueError::new_err(
                "this AtomicPipe is the writing end: it cannot read",
            ))
        } else {
            Ok(())
        }
    }

    /// Reads the next event of a reader in `mode`, waiting as `patience` says; `peek` stops at
    /// a partial line. The mode, the wait and the read are settled under one lock.
    fn next_event(
        &self,
        py: Python<'_>,
        mode: Mode,
        patience: Patience,
        peek: bool,
    ) -> PyResult<Next> {
        self.need_reader()?;
        let (_ends, mut guard) = self.lock(py)?;
        let state: &mut State = &mut guard;
        let wait = read_wait(state, mode, patience)?;
        let got = retry(
            py,
            state,
            |s| match &mut s.end {
                End::Reader(r) => r.next_event_or(wait, peek, &mut interrupted),
                End::Writer(_) => Ok(None),
            },
            |e| *e == ReadError::Os(Errno::INTR),
        )?
        .map_err(|e| read_error(py, e))?;
        Ok(match got {
            Some(event) => Next::Event(event),
            None => {
                let End::Reader(r) = &state.end else {
                    unreachable!()
                };
                if peek && !r.partial_line().is_empty() {
                    Next::Peek(PyBytes::new(py, r.partial_line()).unbind())
                } else {
                    Next::Nothing
                }
            }
        })
    }
}

#[pymethods]
impl AtomicPipe {
    /// The largest write the kernel keeps atomic on a pipe (4096 on Linux).
    #[classattr]
    const PIPE_BUF: usize = PIPE_BUF;

    /// `pair(**options)` → `(reader, writer)`: a new pipe (`pipe2(O_CLOEXEC)`), both ends.
    #[staticmethod]
    #[pyo3(signature = (**options))]
    fn pair(options: Option<&Bound<'_, PyDict>>) -> PyResult<(AtomicPipe, AtomicPipe)> {
        let options = Options::parse(options)?;
        let (r, w) = fdkit::fd::pipe2(fdkit::fd::PipeFlags::CLOEXEC).map_err(os_error)?;
        Ok((
            Self::from_owned(r, false, &options)?,
            Self::from_owned(w, true, &options)?,
        ))
    }

    /// `from_fd(mode, fd, **options)`: wraps an open fd, taking ownership of it (it is closed
    /// with the AtomicPipe). `mode` is `'r'`/`'w'`, or Perl's `'<&'`/`'>&'` (`'<&='`/`'>&='`).
    /// The fd must be open in that direction; when the call fails the fd stays the caller's.
    #[staticmethod]
    #[pyo3(signature = (mode, fd, **options))]
    fn from_fd(mode: &str, fd: Fd, options: Option<&Bound<'_, PyDict>>) -> PyResult<AtomicPipe> {
        let writer = match mode {
            "r" | "<&" | "<&=" => false,
            "w" | ">&" | ">&=" => true,
            other => {
                return Err(PyValueError::new_err(format!(
                    "mode must be 'r' or 'w' (or Perl's '<&' / '>&'), not {other:?}"
                )))
            }
        };
        let options = Options::parse(options)?;
        // The fd must be open (EBADF otherwise) and open for this direction: a reader on a
        // write end would only fail at its first read, far from the mistake.
        let access = rustix::fs::fcntl_getfl(fd.borrow()).map_err(os_error)?;
        let access = access & OFlags::RWMODE;
        let fits = access == OFlags::RDWR
            || (writer && access == OFlags::WRONLY)
            || (!writer && access == OFlags::RDONLY);
        if !fits {
            let (want, end) = if writer {
                ("writing", "a read end")
            } else {
                ("reading", "a write end")
            };
            return Err(PyValueError::new_err(format!(
                "fd {} is not open for {want} (it is {end}); from_fd mode {mode:?}",
                fd.0
            )));
        }
        // SAFETY: the fd is open (fcntl succeeded just above) and the caller hands it over,
        // as documented; from now on only this object closes it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd.0) };
        Self::from_owned(owned, writer, &options)
    }

    /// `read_fifo(path, **options)`: opens a FIFO for reading (waits for a writer to open it,
    /// with the GIL released). See fifo(7).
    #[staticmethod]
    #[pyo3(signature = (path, **options))]
    fn read_fifo(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<AtomicPipe> {
        let options = Options::parse(options)?;
        let fd = Self::open_fifo(py, path, OFlags::RDONLY)?;
        Self::from_owned(fd, false, &options)
    }

    /// `write_fifo(path, **options)`: opens a FIFO for writing (waits for a reader to open it,
    /// with the GIL released). See fifo(7).
    #[staticmethod]
    #[pyo3(signature = (path, **options))]
    fn write_fifo(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<AtomicPipe> {
        let options = Options::parse(options)?;
        let fd = Self::open_fifo(py, path, OFlags::WRONLY)?;
        Self::from_owned(fd, true, &options)
    }

    /// The fd, or -1 once closed.
    fn fileno(&self, py: Python<'_>) -> PyResult<i32> {
        match self.lock(py) {
            Ok((_ends, guard)) => Ok(fd_of(&guard).map_or(-1, |fd| fd.as_raw_fd())),
            Err(e) if e.is_instance_of::<PyValueError>(py) => Ok(-1),
            Err(e) => Err(e),
        }
    }

    /// `'r'` for the reading end, `'w'` for the writing end.
    #[getter]
    fn mode(&self) -> &'static str {
        if self.writer {
            "w"
        } else {
            "r"
        }
    }

    /// Whether `close()` ran (or runs, in another thread).
    #[getter]
    fn closed(&self) -> bool {
        self.ends.is_closed()
    }

    /// Writes one message in atomic chunks (`ceil(len / 4080)` writes of at most PIPE_BUF).
    /// A non-blocking writer queues what the pipe does not take (see `flush`).
    fn write_message(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        self.need_writer()?;
        let data = ByteArg::extract(data)?;
        let bytes = data.as_slice();
        self.queue_then_flush(py, |w| w.queue_message(Writer::current(), bytes))
    }

    /// Writes many messages; chunks of consecutive messages share one write while together
    /// they fit in PIPE_BUF (still atomic). Returns how many messages were written.
    fn write_messages(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<usize> {
        self.need_writer()?;
        let mut count = 0;
        let mut batch: Vec<ByteArg<'_>> = Vec::new();
        let mut batch_bytes = 0;
        for item in messages.try_iter()? {
            let item = item?;
            let data = ByteArg::extract(&item)?;
            batch_bytes += data.as_slice().len();
            batch.push(data);
            if batch_bytes >= 1 << 16 || batch.len() >= 4096 {
                count += self.write_batch(py, &batch)?;
                batch.clear();
                batch_bytes = 0;
            }
        }
        count += self.write_batch(py, &batch)?;
        Ok(count)
    }

    /// Writes `data` as one burst (one atomic write, no header). Returns the bytes written, or
    /// None (nothing written) when it does not fit. Mixed mode refuses data holding 0x0F or
    /// starting with 0x10 (ValueError): a reader would misframe it.
    fn write_burst(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
        self.need_writer()?;
        let data = ByteArg::extract(data)?;
        let bytes = data.as_slice();
        match self.queue_then_flush(py, |w| w.queue_burst(bytes))? {
            Ok(n) => Ok(Some(n)),
            Err(BurstError::TooLarge { .. }) => Ok(None),
            Err(refused) => Err(PyValueError::new_err(refused.to_string())),
        }
    }

    /// The wire size `data` would take as a burst (compressed when compression is on), or
    /// None when it does not fit in one atomic write.
    fn fits_in_burst(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
        self.need_writer()?;
        let data = ByteArg::extract(data)?;
        let bytes = data.as_slice();
        self.with_writer(py, |w| w.fits_in_burst(bytes))
    }

    /// Bytes a non-blocking writer has queued that the pipe has not taken yet.
    #[getter]
    fn pending_output(&self, py: Python<'_>) -> PyResult<usize> {
        let Ok((_ends, guard)) = self.lock(py) else {
            return Ok(0);
        };
        Ok(match &guard.end {
            End::Writer(w) => w.pending_output(),
            End::Reader(_) => 0,
        })
    }

    /// Writes queued output, waiting with poll(2) (never spinning) up to `timeout` seconds
    /// (None: as long as it takes). True when nothing is left queued.
    #[pyo3(signature = (timeout=None))]
    fn flush(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        if !self.writer {
            return Ok(true);
        }
        let wait = Wait::timeout(TIMEOUT.of_opt(timeout)?);
        self.with_writer(py, |w| w.flush_until(wait, &mut interrupted))
    }

    /// The next whole message: None at end of stream, when `timeout` seconds pass, or (non-
    /// blocking) when none is ready. Raises ProtocolError for a broken stream, only after all
    /// complete messages were returned. `with_writer=True` returns `(pid, tid, data)`.
    #[pyo3(signature = (timeout=None, *, with_writer=false))]
    fn read_message<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
        with_writer: bool,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.next_event(py, Mode::Normal, Patience::Timeout(timeout), false)? {
            Next::Event(Event::Message { writer, data }) => {
                message_object(py, writer, &data, with_writer).map(Some)
            }
            Next::Event(_) | Next::Peek(_) | Next::Nothing => Ok(None),
        }
    }

    /// Up to `max` messages: waits like `read_message` for the first, then returns what has
    /// already arrived. `[]` at end of stream, on timeout, or (non-blocking) when none is ready.
    #[pyo3(
        signature = (max=Count(1024), timeout=None, *, with_writer=false),
        text_signature = "(self, /, max=1024, timeout=None, *, with_writer=False)"
    )]
    fn read_messages<'py>(
        &self,
        py: Python<'py>,
        max: Count,
        timeout: Option<f64>,
        with_writer: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        self.need_reader()?;
        let max = max.clamped();
        let mut events = Vec::new();
        {
            let (_ends, mut guard) = self.lock(py)?;
            let state: &mut State = &mut guard;
            let wait = read_wait(state, Mode::Normal, Patience::Timeout(timeout))?;
            let got = retry(
                py,
                state,
                |s| match &mut s.end {
                    End::Reader(r) => r.next_events(max, wait, &mut interrupted, &mut events),
                    End::Writer(_) => Ok(()),
                },
                |e| *e == ReadError::Os(Errno::INTR),
            )?;
            if let Err(e) = got {
                if events.is_empty() {
                    return Err(read_error(py, e));
                }
            }
        }
        let list = PyList::empty(py);
        for event in events {
            if let Event::Message { writer, data } = event {
                list.append(message_object(py, writer, &data, with_writer)?)?;
            }
        }
        Ok(list)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyResult<PyRef<'_, Self>> {
        slf.need_reader()?;
        Ok(slf)
    }

    /// Iteration waits for each message (even on a non-blocking pipe) until end of stream.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        match self.next_event(py, Mode::Normal, Patience::Forever, false)? {
            Next::Event(Event::Message { data, .. }) => Ok(Some(PyBytes::new(py, &data).unbind())),
            _ => Ok(None),
        }
    }

    /// True once the writers are gone and every message was returned.
    fn eof(&self, py: Python<'_>) -> PyResult<bool> {
        let Ok((_ends, guard)) = self.lock(py) else {
            return Ok(false);
        };
        Ok(match &guard.end {
            End::Reader(r) => r.is_eof(),
            End::Writer(_) => false,
        })
    }

    /// Switches to mixed data mode: plain lines, bursts and messages on one stream.
    fn set_mixed_data_mode(&self, py: Python<'_>) -> PyResult<()> {
        let (ends, mut guard) = self.lock(py)?;
        set_mixed(&mut guard);
        ends.recipe().options.mixed = true;
        Ok(())
    }

    /// Whether mixed data mode is on.
    #[getter]
    fn mixed_data_mode(&self, py: Python<'_>) -> PyResult<bool> {
        match self.lock(py) {
            Ok((_ends, guard)) => Ok(mode_of(&guard) == Mode::Mixed),
            Err(e) if e.is_instance_of::<PyValueError>(py) => {
                Ok(self.with_recipe(py, |r| r.options.mixed).unwrap_or(false))
            }
            Err(e) => Err(e),
        }
    }

    /// Mixed mode: the next `('line', b'…\n')`, `('burst', data)` or `('message', data)`.
    /// With `peek_line=True`, a partial line (no `\n` yet) comes back as `('peek', data)`
    /// without being consumed instead of waiting. None at end of stream, on timeout, or
    /// (non-blocking) when nothing is ready.
    #[pyo3(signature = (peek_line=false, timeout=None))]
    fn get_line_burst_or_data<'py>(
        &self,
        py: Python<'py>,
        peek_line: bool,
        timeout: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let patience = Patience::Timeout(timeout);
        Ok(
            match self.next_event(py, Mode::Mixed, patience, peek_line)? {
                Next::Event(event) => Some(event_tuple(py, event)),
                Next::Peek(data) => Some(PyTuple::new(
                    py,
                    [
                        "peek".into_pyobject(py)?.into_any(),
                        data.into_bound(py).into_any(),
                    ],
                )?),
                Next::Nothing => None,
            },
        )
    }

    /// `set_compression(codec='zstd', *, level=3, dictionary=None, keep_compressed=False)`:
    /// compress every later message and burst (writer) or decompress them (reader). `codec`
    /// None turns it off. `dictionary`: raw bytes, or a path to a dictionary file.
    #[pyo3(
        signature = (codec=Some("zstd".to_owned()), *, level=None, dictionary=None, keep_compressed=false),
        text_signature = "(self, /, codec='zstd', *, level=None, dictionary=None, keep_compressed=False)"
    )]
    fn set_compression(
        &self,
        py: Python<'_>,
        codec: Option<String>,
        level: Option<&Bound<'_, PyAny>>,
        dictionary: Option<&Bound<'_, PyAny>>,
        keep_compressed: bool,
    ) -> PyResult<()> {
        let options = Options {
            mixed: false,
            compression: compression(codec.as_deref(), level, dictionary)?,
            keep_compressed,
        };
        let (ends, mut guard) = self.lock(py)?;
        apply_compression(&mut guard, &options)?;
        let mut recipe = ends.recipe();
        recipe.options.compression = options.compression;
        recipe.options.keep_compressed = keep_compressed;
        Ok(())
    }

    /// `'zstd'` when compression is on, else None.
    #[getter]
    fn compression(&self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        let on = match self.lock(py) {
            Ok((_ends, guard)) => guard.compression,
            Err(e) if e.is_instance_of::<PyValueError>(py) => self
                .with_recipe(py, |r| r.options.compression.is_some())
                .unwrap_or(false),
            Err(e) => return Err(e),
        };
        Ok(on.then_some("zstd"))
    }

    /// Whether the fd is in blocking mode.
    #[getter]
    fn get_blocking(&self, py: Python<'_>) -> PyResult<bool> {
        let (_ends, guard) = self.lock(py)?;
        if is_closed(&guard) {
            return Err(closed());
        }
        Ok(match &guard.end {
            End::Reader(r) => r.is_blocking(),
            End::Writer(w) => w.is_blocking(),
        })
    }

    /// Sets or clears `O_NONBLOCK`.
    #[setter]
    fn set_blocking(&self, py: Python<'_>, blocking: bool) -> PyResult<()> {
        let (_ends, mut guard) = self.lock(py)?;
        if is_closed(&guard) {
            return Err(closed());
        }
        match &mut guard.end {
            End::Reader(r) => r.set_blocking(blocking),
            End::Writer(w) => w.set_blocking(blocking),
        }
        .map_err(os_error)
    }

    /// The pipe's capacity in bytes (`F_GETPIPE_SZ`), as `Pipe.size`. An int; calling it
    /// (`size()`, the older spelling) gives the same number. See pipe(7).
    #[getter]
    fn size<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let n = {
            let (_ends, guard) = self.lock(py)?;
            let fd = fd_of(&guard).map_err(|_| closed())?;
            fdkit::fd::pipe_size(fd).map_err(os_error)?
        };
        pipe_size(py, n)
    }

    /// `/proc/sys/fs/pipe-max-size`: the largest size an unprivileged process may set (an
    /// int, callable like `size`).
    #[getter]
    fn max_size<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pipe_size(py, fdkit::fd::pipe_max_size().map_err(os_error)?)
    }

    /// Sets the capacity (`F_SETPIPE_SZ`; rounded up to a power-of-two number of pages);
    /// returns the size set.
    fn resize(&self, py: Python<'_>, size: Count) -> PyResult<usize> {
        let (_ends, guard) = self.lock(py)?;
        let fd = fd_of(&guard).map_err(|_| closed())?;
        fdkit::fd::set_pipe_size(fd, size.clamped()).map_err(os_error)
    }

    /// Sets the capacity to `size`, or to `max_size` when `size` is not allowed.
    fn resize_or_max(&self, py: Python<'_>, size: Count) -> PyResult<usize> {
        let (_ends, guard) = self.lock(py)?;
        let fd = fd_of(&guard).map_err(|_| closed())?;
        fdkit::fd::set_pipe_size_or_max(fd, size.clamped()).map_err(os_error)
    }

    /// Closes the fd; a writer first writes what it has queued (waiting with poll). From any
    /// thread: another thread's call waiting on this pipe ends with ValueError (a write it had
    /// not finished is dropped), and the fd is closed once it has left. Closing twice is
    /// harmless. A vanished reader: BrokenPipeError (the fd is closed anyway).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.ends.close(py)
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Closes the pipe; returns None, so an exception in the block propagates.
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let role = if self.writer { "writer" } else { "reader" };
        let (_ends, guard) = match self.lock(py) {
            Ok(locked) => locked,
            Err(e) if e.is_instance_of::<PyValueError>(py) => {
                return Ok(format!("<AtomicPipe {role} closed>"))
            }
            Err(e) => return Err(e),
        };
        let mode = match mode_of(&guard) {
            Mode::Normal => "",
            Mode::Mixed => " mixed",
        };
        Ok(match fd_of(&guard) {
            Ok(fd) => format!("<AtomicPipe {role} fd={}{mode}>", fd.as_raw_fd()),
            Err(_) => format!("<AtomicPipe {role} closed>"),
        })
    }
}

impl AtomicPipe {
    fn write_batch(&self, py: Python<'_>, batch: &[ByteArg<'_>]) -> PyResult<usize> {
        if batch.is_empty() {
            return Ok(0);
        }
        let slices: Vec<&[u8]> = batch.iter().map(ByteArg::as_slice).collect();
        self.queue_then_flush(py, |w| {
            let writer = Writer::current();
            slices.iter().try_for_each(|s| w.queue_message(writer, s))
        })?;
        Ok(batch.len())
    }
}

impl Drop for AtomicPipe {
    /// A writer dropped with output queued keeps flushing while the reader makes progress
    /// (the core's rule), with the GIL released so other threads run meanwhile.
    fn drop(&mut self) {
        let Some(state) = self.ends.get_mut().state.get_mut() else {
            return;
        };
        let pending = matches!(&state.end, End::Writer(w) if w.pending_output() > 0);
        if pending {
            let taken = std::mem::replace(&mut state.end, End::Reader(placeholder_reader()));
            Python::attach(|py| without_gil(py, move || drop(taken)));
        }
    }
}

fn placeholder_reader() -> MessageReader {
    MessageReader::closed(Mode::Normal)
}
