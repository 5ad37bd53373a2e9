//! An `AtomicPipe`'s end and what it takes to keep it: the core reader or writer, the state
//! behind the fork-safe lock, the recipe that rebuilds it in a forked child, and its release
//! when closed (see `closable`).

use super::fork_safe_lock::{ForkSafe, Held};
use super::options::Options;
use super::protocol_error::protocol_error;
use crate::closable::{closed_error, Release};
use crate::errors::os_error;
use crate::gil::{interrupted, other_threads_exist, retry_interrupted};
use fdkit::atomic_pipe::{MessageReader, MessageWriter, Mode, ReadError};
use fdkit::fd::Errno;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

/// Which end, and its state. One per AtomicPipe, kept in place behind the lock (never moved in
/// a loop), so the reader's larger size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub(super) enum End {
    Reader(MessageReader),
    Writer(MessageWriter),
}

pub(super) struct State {
    pub(super) end: End,
    pub(super) compression: bool,
}

/// Runs `op` on the state with the GIL released, running signal handlers (with the GIL) and
/// resuming after each interruption (`is_intr`). `op` must be resumable (see `pipe`'s docs).
pub(super) fn retry<T: Send, E: Send>(
    py: Python<'_>,
    state: &mut State,
    mut op: impl FnMut(&mut State) -> Result<T, E> + Send,
    is_intr: impl Fn(&E) -> bool,
) -> PyResult<Result<T, E>> {
    // With no other Python thread, nobody can close the pipe during the syscall: a blocking
    // wait may sleep in read(2)/write(2) (one syscall) instead of RWF_NOWAIT + a cancellable
    // poll. After signal handlers ran (one may have started a thread, or closed the pipe),
    // waits are cancellable again.
    set_cancel_waits(state, other_threads_exist(py));
    let mut resumed = false;
    retry_interrupted(
        py,
        || {
            if resumed {
                set_cancel_waits(state, true);
            }
            resumed = true;
            op(state)
        },
        is_intr,
    )
}

pub(super) fn set_cancel_waits(state: &mut State, on: bool) {
    match &mut state.end {
        End::Reader(r) => r.set_cancel_waits(on),
        End::Writer(w) => w.set_cancel_waits(on),
    }
}

pub(super) fn read_error(py: Python<'_>, e: ReadError) -> PyErr {
    match e {
        // A close() from another thread ended the wait.
        ReadError::Os(Errno::CANCELED) => closed(),
        ReadError::Os(errno) => os_error(errno),
        ReadError::Protocol(p) => protocol_error(py, &p),
    }
}

pub(super) fn closed() -> PyErr {
    closed_error("AtomicPipe")
}

/// What the [`Closable`] holds: the end behind the fork-safe lock, and how to rebuild it.
pub(super) struct Ends {
    pub(super) state: ForkSafe<State>,
    pub(super) writer: bool,
    /// How to rebuild the state in a forked child whose parent held the lock at fork time:
    /// the fd number (-1 once closed) and the settings. Only touched with the GIL held.
    pub(super) recipe: Mutex<Recipe>,
    /// The Closable's flag, handed to the core end so a close ends its waits.
    pub(super) closing: Arc<AtomicBool>,
}

pub(super) struct Recipe {
    pub(super) fd: i32,
    pub(super) options: Options,
}

/// Builds an end's state over `fd` with `options` (which were checked when parsed); its waits
/// end once `closing` is set.
pub(super) fn build_state(
    fd: OwnedFd,
    writer: bool,
    options: &Options,
    closing: &Arc<AtomicBool>,
) -> PyResult<State> {
    let mode = if options.mixed {
        Mode::Mixed
    } else {
        Mode::Normal
    };
    let end = if writer {
        End::Writer(MessageWriter::new(fd, mode).map_err(os_error)?)
    } else {
        End::Reader(MessageReader::new(fd, mode).map_err(os_error)?)
    };
    let mut state = State {
        end,
        compression: false,
    };
    set_cancel(&mut state, Some(closing));
    apply_compression(&mut state, options)?;
    Ok(state)
}

pub(super) fn set_cancel(state: &mut State, closing: Option<&Arc<AtomicBool>>) {
    match &mut state.end {
        End::Reader(r) => r.set_cancel(closing.cloned()),
        End::Writer(w) => w.set_cancel(closing.cloned()),
    }
}

impl Ends {
    /// Takes the lock (see `fork_safe_lock`); in a child forked while another thread held it,
    /// rebuilds the end from the recipe.
    pub(super) fn lock(&self, py: Python<'_>) -> PyResult<Held<State>> {
        self.state.lock(py, || self.rebuild())
    }

    pub(super) fn recipe(&self) -> MutexGuard<'_, Recipe> {
        self.recipe.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn rebuild(&self) -> State {
        let recipe = self.recipe();
        let closed = || State {
            end: if self.writer {
                End::Writer(MessageWriter::closed(Mode::Normal))
            } else {
                End::Reader(MessageReader::closed(Mode::Normal))
            },
            compression: false,
        };
        if recipe.fd < 0 {
            return closed();
        }
        // SAFETY: the fd belonged to the state that is now set aside and leaked (never
        // dropped), so this is again its only owner; it is open (the parent's state had it).
        let fd = unsafe { OwnedFd::from_raw_fd(recipe.fd) };
        build_state(fd, self.writer, &recipe.options, &self.closing).unwrap_or_else(|_| closed())
    }
}

impl Release for Ends {
    /// Closes the end: a writer first writes what it has queued, waiting with poll (Ctrl-C
    /// stops that wait and leaves the pipe open). Deferred (from the last use, see
    /// `closable`), nothing waits: the cancel flag stays set, so queued output the pipe does
    /// not take at once is dropped.
    fn release(&mut self, py: Python<'_>, deferred: bool) -> PyResult<()> {
        let mut guard = self.lock(py)?;
        let state: &mut State = &mut guard;
        let done = if deferred {
            let mut go_on = fdkit::fd::no_checkpoint;
            Ok(match &mut state.end {
                End::Writer(w) => w.close(&mut go_on),
                End::Reader(r) => r.close(),
            })
        } else {
            // The closer's own flush is not ended by the flag its close() just set.
            set_cancel(state, None);
            let done = retry(
                py,
                state,
                |s| match &mut s.end {
                    End::Writer(w) => w.close(&mut interrupted),
                    End::Reader(r) => r.close(),
                },
                |e| *e == Errno::INTR,
            );
            set_cancel(state, Some(&self.closing));
            done
        };
        if is_closed(state) {
            self.recipe().fd = -1;
        }
        match done? {
            Ok(()) | Err(Errno::CANCELED) => Ok(()),
            Err(e) => Err(os_error(e)),
        }
    }

    fn is_released(&self) -> bool {
        self.recipe().fd < 0
    }
}

pub(super) fn is_closed(state: &State) -> bool {
    match &state.end {
        End::Reader(r) => r.is_closed(),
        End::Writer(w) => w.is_closed(),
    }
}

pub(super) fn mode_of(state: &State) -> Mode {
    match &state.end {
        End::Reader(r) => r.mode(),
        End::Writer(w) => w.mode(),
    }
}

pub(super) fn fd_of(state: &State) -> Result<BorrowedFd<'_>, Errno> {
    match &state.end {
        End::Reader(r) => r.fd(),
        End::Writer(w) => w.fd(),
    }
}

pub(super) fn set_mixed(state: &mut State) {
    match &mut state.end {
        End::Reader(r) => r.set_mixed_mode(),
        End::Writer(w) => w.set_mode(Mode::Mixed),
    }
}

pub(super) fn apply_compression(state: &mut State, options: &Options) -> PyResult<()> {
    let config = options.compression();
    let done = match &mut state.end {
        End::Reader(r) => r.set_compression(config.as_ref(), options.keep_compressed),
        End::Writer(w) => w.set_compression(config.as_ref()),
    };
    done.map_err(|e| PyValueError::new_err(format!("zstd refused the settings: {e}")))?;
    state.compression = config.is_some();
    Ok(())
}
