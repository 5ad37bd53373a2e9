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
use super::options::{codec_arg, dictionary_arg, level_arg, Options};
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
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use std::ffi::CStr;
use std::os::fd::BorrowedFd;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
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

    /// Wraps `fd` (a pipe or FIFO end, checked) open in the direction `writer` says. With
    /// `dup`, a duplicate (`F_DUPFD_CLOEXEC`) is taken and `fd` stays the caller's; without, the
    /// fd is taken over only when this succeeds. `what` names the caller in messages.
    pub(super) fn from_raw(
        fd: BorrowedFd<'_>,
        writer: bool,
        dup: bool,
        pipe_only: bool,
        options: &Options,
        what: &str,
    ) -> PyResult<Self> {
        // The fd must be open (EBADF otherwise) and open for this direction: a reader on a
        // write end would only fail at its first read, far from the mistake.
        let access = rustix::fs::fcntl_getfl(fd).map_err(os_error)?;
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
                "fd {} is not open for {want} (it is {end}); {what}",
                fd.as_raw_fd()
            )));
        }
        if pipe_only {
            check_fifo(fd, || format!("fd {}", fd.as_raw_fd()))?;
        }
        let owned = if dup {
            fdkit::fd::dup(fd, true).map_err(os_error)?
        } else {
            // SAFETY: the fd is open (fcntl succeeded just above) and the caller hands it
            // over, as documented; from now on only this object closes it.
            unsafe { OwnedFd::from_raw_fd(fd.as_raw_fd()) }
        };
        Self::from_owned(owned, writer, options)
    }

    /// A new object over a duplicate of this end's fd, with the same settings.
    fn clone_end(&self, py: Python<'_>, writer: bool) -> PyResult<AtomicPipe> {
        if writer {
            self.need_writer()?;
        } else {
            self.need_reader()?;
        }
        let (ends, guard) = self.lock(py)?;
        let fd = fd_of(&guard).map_err(|_| closed())?;
        let dup = fdkit::fd::dup(fd, true).map_err(os_error)?;
        let options = ends.recipe().options.clone();
        Self::from_owned(dup, writer, &options)
    }

    /// Changes the settings (compression, level, dictionary, keep_compressed) under the lock:
    /// checks them, applies them to the end, then remembers them.
    fn update_options(
        &self,
        py: Python<'_>,
        change: impl FnOnce(&mut Options) -> PyResult<()>,
    ) -> PyResult<()> {
        let (ends, mut guard) = self.lock(py)?;
        let mut options = ends.recipe().options.clone();
        change(&mut options)?;
        options.check()?;
        apply_compression(&mut guard, &options)?;
        ends.recipe().options = options;
        Ok(())
    }

    /// The settings, open or closed.
    fn options(&self, py: Python<'_>) -> Options {
        self.with_recipe(py, |r| r.options.clone())
            .unwrap_or_default()
    }

    /// Runs `op` on the reader under the lock, with the GIL released and signals handled.
    fn with_reader<T: Send>(
        &self,
        py: Python<'_>,
        op: impl FnMut(&mut MessageReader) -> Result<T, Errno> + Send,
    ) -> PyResult<T> {
        self.need_reader()?;
        let (_ends, mut guard) = self.lock(py)?;
        let state: &mut State = &mut guard;
        let mut op = op;
        let r = retry(
            py,
            state,
            |s| match &mut s.end {
                End::Reader(r) if r.is_closed() => Err(Errno::BADF),
                End::Reader(r) => op(r),
                End::Writer(_) => Err(Errno::BADF),
            },
            |e| *e == Errno::INTR,
        )?;
        r.map_err(|e| self.map_errno(state, e))
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
        let fd = retry_eintr(py, || {
            fdkit::fd::open(cpath, flags, fdkit::fd::Mode::empty())
        })?
        .map_err(|e| os_error_with_path(e, path))?;
        check_fifo(fd.as_fd(), || {
            path.repr()
                .map_or_else(|_| "the path".to_owned(), |r| r.to_string())
        })?;
        Ok(fd)
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
            Some(event) => {
                let kept = match (&event, &mut state.end) {
                    (Event::Message { .. } | Event::Burst(_), End::Reader(r)) => {
                        r.take_compressed()
                    }
                    _ => None,
                };
                Next::Event(event, kept)
            }
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
    fn pair(
        py: Python<'_>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<(AtomicPipe, AtomicPipe)> {
        let options = Options::parse(options)?;
        let (r, w) = fdkit::fd::pipe2(fdkit::fd::PipeFlags::CLOEXEC).map_err(os_error)?;
        let reader = Self::from_owned(r, false, &options)?;
        if options.mixed {
            // As Perl's pair(): mixed data mode makes the read side non-blocking.
            reader.set_blocking(py, false)?;
        }
        Ok((reader, Self::from_owned(w, true, &options)?))
    }

    /// `new(**options)`: a new pipe held whole, as Perl's `Atomic::Pipe->new`: take
    /// `clone_writer()`s (for other processes or threads), then keep one end with `reader()`
    /// or `writer()` (which closes the other). See [`AtomicPipeEnds`].
    #[staticmethod]
    #[pyo3(signature = (**options))]
    #[allow(clippy::new_ret_no_self)] // Perl's name; the whole pipe is another class
    fn new(
        py: Python<'_>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<super::ends::AtomicPipeEnds> {
        let (r, w) = Self::pair(py, options)?;
        let (r, w) = (Py::new(py, r)?.into_any(), Py::new(py, w)?.into_any());
        Ok(super::ends::AtomicPipeEnds::new(r, w))
    }

    /// `from_fd(mode, fd, *, dup=False, pipe_only=True, **options)`: wraps an open fd, taking
    /// ownership of it (it is closed with the AtomicPipe), or a duplicate of it with
    /// `dup=True` (the fd stays the caller's). `mode` is `'r'`/`'w'`, or Perl's `'<&'`/`'>&'`
    /// (`'<&='`/`'>&='`). The fd must be open in that direction, and a pipe or FIFO unless
    /// `pipe_only=False` (a file holding a captured stream, say); when the call fails the fd
    /// stays the caller's.
    #[staticmethod]
    #[pyo3(signature = (mode, fd, *, dup=false, pipe_only=true, **options))]
    fn from_fd(
        mode: &str,
        fd: Fd,
        dup: bool,
        pipe_only: bool,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<AtomicPipe> {
        let writer = writer_of_mode(mode)?;
        let options = Options::parse(options)?;
        Self::from_raw(
            fd.borrow(),
            writer,
            dup,
            pipe_only,
            &options,
            &format!("from_fd mode {mode:?}"),
        )
    }

    /// `from_file(file, mode=None, **options)`: Perl's `from_fh`. Wraps a duplicate of
    /// `file.fileno()` (the file object keeps its own fd), a pipe or FIFO. `mode` defaults to
    /// the fd's access mode (`O_RDONLY`: reader, `O_WRONLY`: writer); a read-write fd needs it.
    #[staticmethod]
    #[pyo3(signature = (file, mode=None, **options))]
    fn from_file(
        file: &Bound<'_, PyAny>,
        mode: Option<&str>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<AtomicPipe> {
        let fd: Fd = match file.call_method0("fileno") {
            Ok(n) => n.extract()?,
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(file.py()) => {
                return Err(PyTypeError::new_err(format!(
                    "from_file needs an object with fileno(), not {}",
                    crate::args::type_name(file)
                )))
            }
            Err(e) => return Err(e),
        };
        let writer = match mode {
            Some(mode) => writer_of_mode(mode)?,
            None => {
                let access = rustix::fs::fcntl_getfl(fd.borrow()).map_err(os_error)?;
                match access & OFlags::RWMODE {
                    a if a == OFlags::RDONLY => false,
                    a if a == OFlags::WRONLY => true,
                    _ => {
                        return Err(PyValueError::new_err(format!(
                            "fd {} is open read-write: pass mode 'r' or 'w'",
                            fd.0
                        )))
                    }
                }
            }
        };
        let options = Options::parse(options)?;
        Self::from_raw(fd.borrow(), writer, true, true, &options, "from_file")
    }

    /// `read_fifo(path, *, read_write=False, **options)`: opens a FIFO for reading (waits for
    /// a writer to open it, with the GIL released). `read_write=True` opens it read-write, as
    /// Perl's `read_fifo` does: the open never waits, and the reader (a writer of its own
    /// FIFO) sees no end of stream between writers. ValueError when the path is not a FIFO.
    /// See fifo(7).
    #[staticmethod]
    #[pyo3(signature = (path, *, read_write=false, **options))]
    fn read_fifo(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        read_write: bool,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<AtomicPipe> {
        let options = Options::parse(options)?;
        let access = if read_write {
            OFlags::RDWR
        } else {
            OFlags::RDONLY
        };
        let fd = Self::open_fifo(py, path, access)?;
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

    /// Writes one message in atomic chunks (`ceil(len / 4080)` writes of at most PIPE_BUF);
    /// returns the number of chunks, as Perl's does. A non-blocking writer queues what the
    /// pipe does not take (see `flush`).
    fn write_message(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<usize> {
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
    /// complete messages were returned. `with_writer=True` returns `(pid, tid, data)`. With
    /// compression and `keep_compressed`, the data is a `Decompressed` (bytes) whose
    /// `.compressed` is the zstd frame it travelled as (Perl's `($message, $compressed)`).
    #[pyo3(signature = (timeout=None, *, with_writer=false))]
    fn read_message<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
        with_writer: bool,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.next_event(py, Mode::Normal, Patience::Timeout(timeout), false)? {
            Next::Event(Event::Message { writer, data }, kept) => {
                message_object(py, writer, &data, with_writer, kept.as_deref()).map(Some)
            }
            Next::Event(..) | Next::Peek(_) | Next::Nothing => Ok(None),
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
        let mut kept = std::collections::VecDeque::new();
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
            if let End::Reader(r) = &mut state.end {
                while let Some(frame) = r.take_compressed() {
                    kept.push_back(frame);
                }
            }
        }
        let list = PyList::empty(py);
        for event in events {
            match event {
                Event::Message { writer, data } => {
                    let frame = kept.pop_front();
                    list.append(message_object(
                        py,
                        writer,
                        &data,
                        with_writer,
                        frame.as_deref(),
                    )?)?;
                }
                Event::Burst(_) => {
                    kept.pop_front();
                }
                Event::Line(_) => {}
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
            Next::Event(Event::Message { data, .. }, _) => {
                Ok(Some(PyBytes::new(py, &data).unbind()))
            }
            _ => Ok(None),
        }
    }

    /// True once the writers are gone and every message was returned. Looks at the pipe (one
    /// read that does not wait, as Perl's `eof`), so it turns True when the last writer
    /// closed even if no read saw it yet. False on a writer or a closed pipe.
    fn eof(&self, py: Python<'_>) -> PyResult<bool> {
        if self.writer || self.ends.is_closed() {
            return Ok(false);
        }
        match self.with_reader(py, |r| r.check_eof(&mut interrupted)) {
            Ok(eof) => Ok(eof),
            Err(e) if e.is_instance_of::<PyValueError>(py) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads once into the buffer (Perl's `fill_buffer`), waiting like `read_message`: the
    /// bytes read, 0 at end of stream, on timeout, or (non-blocking) when nothing is ready.
    #[pyo3(signature = (timeout=None))]
    fn fill_buffer(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<usize> {
        self.need_reader()?;
        let wait = {
            let (_ends, guard) = self.lock(py)?;
            let End::Reader(r) = &guard.end else {
                unreachable!("need_reader checked the end");
            };
            if r.is_closed() {
                return Err(closed());
            }
            match TIMEOUT.of_opt(timeout)? {
                Some(t) => Wait::timeout(Some(t)),
                None if r.is_blocking() => Wait::Until(None),
                None => Wait::Never,
            }
        };
        self.with_reader(py, |r| r.fill_buffer(wait, &mut interrupted))
    }

    /// The most bytes one read(2) asks for (reader; Perl's `read_size`). Settable.
    #[getter]
    fn get_read_size(&self, py: Python<'_>) -> PyResult<usize> {
        self.need_reader()?;
        let (_ends, guard) = self.lock(py)?;
        Ok(match &guard.end {
            End::Reader(r) => r.read_size(),
            End::Writer(_) => 0,
        })
    }

    #[setter]
    fn set_read_size(&self, py: Python<'_>, n: Count) -> PyResult<()> {
        self.need_reader()?;
        if n.0 == 0 {
            return Err(PyValueError::new_err("read_size must be at least 1"));
        }
        let (_ends, mut guard) = self.lock(py)?;
        if let End::Reader(r) = &mut guard.end {
            r.set_read_size(n.clamped());
        }
        Ok(())
    }

    /// True for the reading end (Perl's `is_reader`).
    #[getter]
    fn is_reader(&self) -> bool {
        !self.writer
    }

    /// True for the writing end (Perl's `is_writer`).
    #[getter]
    fn is_writer(&self) -> bool {
        self.writer
    }

    /// Another writer on the same pipe: a new AtomicPipe over a duplicate of this writer's fd
    /// (`F_DUPFD_CLOEXEC`), with the same settings. Perl's `clone_writer`.
    pub(super) fn clone_writer(&self, py: Python<'_>) -> PyResult<AtomicPipe> {
        self.clone_end(py, true)
    }

    /// Another reader on the same pipe (a duplicate fd, the same settings, its own buffer).
    /// Perl's `clone_reader`.
    pub(super) fn clone_reader(&self, py: Python<'_>) -> PyResult<AtomicPipe> {
        self.clone_end(py, false)
    }

    /// Switches to mixed data mode: plain lines, bursts and messages on one stream. As in
    /// Perl, this makes the read side non-blocking: `get_line_burst_or_data()` then returns
    /// `(None, None)` at once when nothing is ready.
    fn set_mixed_data_mode(&self, py: Python<'_>) -> PyResult<()> {
        let (ends, mut guard) = self.lock(py)?;
        if let End::Reader(r) = &mut guard.end {
            if !r.is_closed() {
                r.set_blocking(false).map_err(os_error)?;
            }
        }
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
    /// without being consumed instead of waiting. `(None, None)` at end of stream, on
    /// timeout, or (non-blocking, as mixed mode makes the reader) when nothing is ready. With
    /// compression and `keep_compressed`, a burst's or message's data is a `Decompressed`
    /// (bytes) whose `.compressed` is its zstd frame.
    #[pyo3(signature = (peek_line=false, timeout=None))]
    fn get_line_burst_or_data<'py>(
        &self,
        py: Python<'py>,
        peek_line: bool,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let patience = Patience::Timeout(timeout);
        match self.next_event(py, Mode::Mixed, patience, peek_line)? {
            Next::Event(event, kept) => event_tuple(py, event, kept.as_deref()),
            Next::Peek(data) => PyTuple::new(
                py,
                [
                    "peek".into_pyobject(py)?.into_any(),
                    data.into_bound(py).into_any(),
                ],
            ),
            Next::Nothing => PyTuple::new(py, [py.None(), py.None()]),
        }
    }

    /// `set_compression(codec='zstd', *, level=None, dictionary=None, keep_compressed=None)`:
    /// compress every later message and burst (writer) or decompress them (reader). What is
    /// not restated stays as it was (level, dictionary, keep_compressed), as in Perl. `codec`
    /// None turns compression off and forgets the level (the dictionary stays; clear it with
    /// `compression_dictionary = None`). `dictionary`: raw bytes, or a path to a file.
    #[pyo3(
        signature = (codec=Some("zstd".to_owned()), *, level=None, dictionary=None, keep_compressed=None),
        text_signature = "(self, /, codec='zstd', *, level=None, dictionary=None, keep_compressed=None)"
    )]
    fn set_compression(
        &self,
        py: Python<'_>,
        codec: Option<String>,
        level: Option<&Bound<'_, PyAny>>,
        dictionary: Option<&Bound<'_, PyAny>>,
        keep_compressed: Option<bool>,
    ) -> PyResult<()> {
        let zstd = codec_arg(codec.as_deref())?;
        let level = level_arg(level)?;
        let dictionary = dictionary_arg(dictionary)?;
        self.update_options(py, |o| {
            o.zstd = zstd;
            if zstd {
                o.level = level.or(o.level);
            } else {
                o.level = None;
            }
            if dictionary.is_some() {
                o.dictionary = dictionary;
            }
            if let Some(keep) = keep_compressed {
                o.keep_compressed = keep;
            }
            Ok(())
        })
    }

    /// The zstd level set (None: not set, zstd's level 3 is used). Setting it (None resets)
    /// applies to the next message.
    #[getter]
    fn get_compression_level(&self, py: Python<'_>) -> Option<i32> {
        self.options(py).level
    }

    #[setter]
    fn set_compression_level(
        &self,
        py: Python<'_>,
        level: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let level = level_arg(level)?;
        self.update_options(py, |o| {
            o.level = level;
            Ok(())
        })
    }

    /// The dictionary's bytes, or None. Setting it (bytes, a buffer, a path) needs compression
    /// on; None clears it (as Perl's `set_compression_dictionary`).
    #[getter]
    fn get_compression_dictionary<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.options(py).dictionary.map(|d| PyBytes::new(py, &d))
    }

    #[setter]
    fn set_compression_dictionary(
        &self,
        py: Python<'_>,
        dictionary: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let dictionary = dictionary_arg(dictionary)?;
        self.update_options(py, |o| {
            if dictionary.is_some() && !o.zstd {
                return Err(PyValueError::new_err(
                    "compression_dictionary needs compression on (set_compression('zstd'))",
                ));
            }
            o.dictionary = dictionary;
            Ok(())
        })
    }

    /// Whether reads return the compressed form too (`Decompressed.compressed`, see
    /// `read_message`). Settable.
    #[getter]
    fn get_keep_compressed(&self, py: Python<'_>) -> bool {
        self.options(py).keep_compressed
    }

    #[setter]
    fn set_keep_compressed(&self, py: Python<'_>, keep: bool) -> PyResult<()> {
        self.update_options(py, |o| {
            o.keep_compressed = keep;
            Ok(())
        })
    }

    /// `'zstd'` when compression is on, else None.
    #[getter]
    fn compression(&self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        let on = match self.lock(py) {
            Ok((_ends, guard)) => guard.compression,
            Err(e) if e.is_instance_of::<PyValueError>(py) => {
                self.with_recipe(py, |r| r.options.zstd).unwrap_or(false)
            }
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
    pub(super) fn close(&self, py: Python<'_>) -> PyResult<()> {
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

/// Perl's modes: `'r'`/`'<&'`/`'<&='` read, `'w'`/`'>&'`/`'>&='` write.
fn writer_of_mode(mode: &str) -> PyResult<bool> {
    match mode {
        "r" | "<&" | "<&=" => Ok(false),
        "w" | ">&" | ">&=" => Ok(true),
        other => Err(PyValueError::new_err(format!(
            "mode must be 'r' or 'w' (or Perl's '<&' / '>&'), not {other:?}"
        ))),
    }
}

/// ValueError unless `fd` is a pipe or a FIFO (Perl's `-p` check). See fstat(2).
fn check_fifo(fd: BorrowedFd<'_>, name: impl FnOnce() -> String) -> PyResult<()> {
    let st = fdkit::fd::fstat(fd).map_err(os_error)?;
    if st.mode & libc::S_IFMT != libc::S_IFIFO {
        return Err(PyValueError::new_err(format!(
            "{} is not a pipe or FIFO",
            name()
        )));
    }
    Ok(())
}

impl AtomicPipe {
    fn write_batch(&self, py: Python<'_>, batch: &[ByteArg<'_>]) -> PyResult<usize> {
        if batch.is_empty() {
            return Ok(0);
        }
        let slices: Vec<&[u8]> = batch.iter().map(ByteArg::as_slice).collect();
        self.queue_then_flush(py, |w| {
            let writer = Writer::current();
            slices
                .iter()
                .try_for_each(|s| w.queue_message(writer, s).map(drop))
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
