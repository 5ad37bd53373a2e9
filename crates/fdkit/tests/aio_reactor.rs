//! `fdkit::aio::Reactor` against the real kernel, one test per promise of its contract (the
//! `fdkit::aio` module docs): a wait on an epoll instance returns `true` when the instance
//! becomes readable (at once when it already is) and `false` when the timeout passes or a
//! signal comes; whatever it returns, nothing is left armed in the ring — no poll in the
//! ring's fdinfo, no completion that interrupts a later blocking call of the same thread with
//! `EINTR` — even when readiness races the cancel; a closed fd is the poll's `EBADF`; a
//! reactor is built in one thread and waited in by others; a forked child's copy refuses to
//! wait and leaves the parent's ring alone; reactors are built and dropped without a leak.
//!
//! The contract tests run on each way the reactor waits: the poll of the epoll fd
//! ([`Reactor::wait`]) and, where the kernel runs `IORING_OP_EPOLL_WAIT` (Linux 6.15), the
//! epoll wait made by the ring ([`Reactor::epoll_wait`], whose events are checked against
//! epoll_wait(2)'s own).
//!
//! Each test skips (printing `SKIPPED <test>: <why>` on stderr) when io_uring is unavailable;
//! with `FDKIT_REQUIRE_URING=1` a missing io_uring fails the test instead. Every wait has a
//! deadline.

use fdkit::aio::{Reactor, ReactorOptions};
use fdkit::fd::{self, PipeFlags};
use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
use rustix::event::Timespec;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

mod common;
use common::{require_uring, skip};

/// How long any one wait for something that must happen may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// A wait that must not sleep returns well within this (its own timeout is [`TIMEOUT`]).
const AT_ONCE: Duration = Duration::from_secs(1);

/// The test that counts the process's open fds holds this exclusively; every other test holds
/// it shared, so no fd opens or closes meanwhile.
static FDS: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    FDS.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    FDS.write().unwrap_or_else(|e| e.into_inner())
}

/// A reactor for each way it waits: the poll of the epoll fd, and (where the kernel runs
/// `IORING_OP_EPOLL_WAIT`, Linux 6.15) the epoll wait made by the ring. Empty without io_uring.
fn reactors() -> Vec<Reactor> {
    if !require_uring() {
        return Vec::new();
    }
    let poll = ReactorOptions {
        epoll_wait: false,
        ..ReactorOptions::DEFAULT
    };
    let mut all = vec![Reactor::new(poll).expect("Reactor::new")];
    let r = Reactor::new(ReactorOptions::DEFAULT).expect("Reactor::new");
    if r.reads_epoll() {
        all.push(r);
    } else {
        skip("this kernel has no IORING_OP_EPOLL_WAIT (Linux 6.15): the poll path only");
    }
    all
}

/// One wait in the reactor's own way: `Reactor::wait` (true: readable), or
/// `Reactor::epoll_wait` (true: it returned events, each of them the watched pipe's).
fn try_wait(
    r: &mut Reactor,
    epfd: BorrowedFd<'_>,
    timeout: Option<Duration>,
) -> fdkit::Result<bool> {
    if !r.reads_epoll() {
        return r.wait(epfd, timeout);
    }
    let mut events = Vec::new();
    let n = r.epoll_wait(epfd, &mut events, 8, timeout)?;
    assert_eq!(n, events.len());
    assert!(
        events.iter().all(|e| e.data.u64() == 1),
        "an event of no registered fd"
    );
    Ok(n > 0)
}

/// An epoll instance watching the read end of a pipe; returns the instance and both ends.
struct Watched {
    epoll: OwnedFd,
    rd: OwnedFd,
    wr: OwnedFd,
}

fn watched_pipe() -> Watched {
    let epoll = epoll::create(CreateFlags::CLOEXEC).unwrap();
    let (rd, wr) = fd::pipe2(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).unwrap();
    epoll::add(&epoll, &rd, EventData::new_u64(1), EventFlags::IN).unwrap();
    Watched { epoll, rd, wr }
}

impl Watched {
    fn make_readable(&self) {
        fd::write(&self.wr, b"x").unwrap();
    }

    fn drain(&self) {
        let mut buf = [0u8; 64];
        while matches!(fd::read(&self.rd, &mut buf), Ok(n) if n > 0) {}
    }
}

/// How many polls the kernel holds armed for the ring (its fdinfo's `PollList`), or None when
/// this kernel's fdinfo does not list them.
fn armed_polls(r: &Reactor) -> Option<usize> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", r.ring_fd())).ok()?;
    let mut lines = info.lines().skip_while(|l| !l.starts_with("PollList:"));
    lines.next()?;
    Some(
        lines
            .take_while(|l| l.starts_with(char::is_whitespace))
            .count(),
    )
}

/// Checks that nothing of the ring is armed: no op in flight, no poll in the kernel's list.
fn assert_nothing_armed(r: &Reactor, after: &str) {
    assert_eq!(r.in_flight(), 0, "{after}: ops left in flight");
    if let Some(n) = armed_polls(r) {
        assert_eq!(n, 0, "{after}: the kernel still holds {n} poll(s) armed");
    }
}

fn wait(r: &mut Reactor, w: &Watched, timeout: Duration) -> bool {
    try_wait(r, w.epoll.as_fd(), Some(timeout)).expect("wait")
}

/// epoll_wait(2) with `timeout` on an epoll instance of its own (watching nothing): what a
/// blocking C call in the loop's thread does while the loop runs a callback.
fn blocking_epoll_wait(timeout: Duration) -> rustix::io::Result<usize> {
    let other = epoll::create(CreateFlags::CLOEXEC).unwrap();
    let mut events: Vec<epoll::Event> = Vec::with_capacity(4);
    let ts = Timespec {
        tv_sec: timeout.as_secs() as _,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    let (ready, _) = epoll::wait(&other, events.spare_capacity_mut(), Some(&ts))?;
    Ok(ready.len())
}

#[test]
fn a_wait_returns_true_once_the_epoll_instance_becomes_readable() {
    let _fds = shared();
    for mut r in reactors() {
        let w = watched_pipe();
        let writer = {
            let wr = w.wr.try_clone().unwrap();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                fd::write(&wr, b"x").unwrap();
            })
        };
        let t = Instant::now();
        assert!(wait(&mut r, &w, TIMEOUT), "the write was not seen");
        let took = t.elapsed();
        writer.join().unwrap();
        assert!(
            took >= Duration::from_millis(90) && took < AT_ONCE,
            "woke after {took:?}, the write came after 100 ms"
        );
        assert_nothing_armed(&r, "a wait that saw its fd readable");
        // Nothing was taken: the byte is still in the pipe, and epoll still reports it.
        let mut buf = [0u8; 4];
        assert_eq!(fd::read(&w.rd, &mut buf).unwrap(), 1);
    }
}

#[test]
fn an_instance_that_is_already_readable_ends_the_wait_at_once() {
    let _fds = shared();
    for mut r in reactors() {
        let w = watched_pipe();
        w.make_readable();
        for _ in 0..100 {
            let t = Instant::now();
            assert!(wait(&mut r, &w, TIMEOUT));
            assert!(t.elapsed() < AT_ONCE, "slept {:?}", t.elapsed());
            assert_nothing_armed(&r, "a wait on a readable instance");
        }
    }
}

#[test]
fn a_zero_timeout_just_looks() {
    let _fds = shared();
    for mut r in reactors() {
        let w = watched_pipe();
        let t = Instant::now();
        assert!(!wait(&mut r, &w, Duration::ZERO));
        assert_nothing_armed(&r, "a zero-timeout wait on nothing");
        w.make_readable();
        assert!(wait(&mut r, &w, Duration::ZERO));
        assert_nothing_armed(&r, "a zero-timeout wait on a readable instance");
        assert!(t.elapsed() < AT_ONCE, "took {:?}", t.elapsed());
    }
}

#[test]
fn a_timeout_returns_false_and_leaves_nothing_armed() {
    let _fds = shared();
    for mut r in reactors() {
        let w = watched_pipe();
        let t = Instant::now();
        assert!(!wait(&mut r, &w, Duration::from_millis(150)));
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(140) && took < AT_ONCE,
            "a 150 ms wait took {took:?}"
        );
        assert_nothing_armed(&r, "a wait that timed out");
        // The fd becomes readable now: a poll left armed would complete, and on a ring without
        // `COOP_TASKRUN` (kernels before 5.19) its task work would interrupt this thread's next
        // blocking call with EINTR. Nothing may. (With `COOP_TASKRUN` the kernel does not kick
        // the thread, so this part passes either way there; the fdinfo count above is the check
        // that holds on every setup.)
        w.make_readable();
        let t = Instant::now();
        assert_eq!(
            blocking_epoll_wait(Duration::from_millis(300)),
            Ok(0),
            "a blocking call after the wait was interrupted"
        );
        assert!(t.elapsed() >= Duration::from_millis(290));
        assert_nothing_armed(&r, "readiness after a timed-out wait");
        // And the next wait sees the readiness.
        assert!(wait(&mut r, &w, TIMEOUT));
    }
}

extern "C" fn on_sigusr1(_: libc::c_int) {}

/// Installs a SIGUSR1 handler that does nothing (once), so that the signal interrupts a wait
/// (no `SA_RESTART`) without killing the process. Nothing else in this binary uses SIGUSR1.
fn catch_sigusr1() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction is valid (no flags, empty mask filled in next); the
        // handler does nothing, so it is async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigusr1 as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            assert_eq!(
                libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
                0
            );
        }
    });
}

/// Once `after` has passed, sends SIGUSR1 to the thread that made it every 50 ms, until it is
/// dropped: ends a wait that would otherwise go on.
struct Interrupter {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Interrupter {
    fn after(after: Duration) -> Interrupter {
        catch_sigusr1();
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let done = done.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                    if start.elapsed() >= after {
                        // SAFETY: `me` is alive until `done` is set: the guard's drop, on
                        // that thread, joins this one first.
                        unsafe { libc::pthread_kill(me, libc::SIGUSR1) };
                        std::thread::sleep(Duration::from_millis(40));
                    }
                }
            })
        };
        Interrupter {
            done,
            thread: Some(thread),
        }
    }
}

impl Drop for Interrupter {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn a_signal_ends_the_wait_early_with_false_and_nothing_armed() {
    let _fds = shared();
    for mut r in reactors() {
        let w = watched_pipe();
        for timeout in [Some(TIMEOUT), None] {
            // Signals every 50 ms until the wait is over: one sent before it sleeps would be
            // missed.
            let interrupter = Interrupter::after(Duration::from_millis(50));
            let t = Instant::now();
            let got = try_wait(&mut r, w.epoll.as_fd(), timeout);
            drop(interrupter);
            assert!(!got.expect("a signal is not an error"));
            assert!(
                t.elapsed() < AT_ONCE,
                "the signal did not end the wait ({timeout:?})"
            );
            assert_nothing_armed(&r, "a wait ended by a signal");
        }
        w.make_readable();
        assert!(wait(&mut r, &w, TIMEOUT));
    }
}

#[test]
fn readiness_racing_the_cancel_leaves_nothing_armed_and_is_never_lost() {
    let _fds = shared();
    for mut r in reactors() {
        // A writer makes the instance readable at random moments while waits of 0 to 1 ms time
        // out: sometimes the poll completes between the timeout and its cancel. Whatever each
        // wait returns, it leaves nothing armed; once the byte is there, a wait says so.
        let w = watched_pipe();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (wr, stop) = (w.wr.try_clone().unwrap(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    n = n
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    std::thread::sleep(Duration::from_micros(200 + (n >> 54)));
                    let _ = fd::write(&wr, b"x");
                }
            })
        };
        let deadline = Instant::now() + TIMEOUT;
        let (mut seen, mut missed) = (0, 0);
        for i in 0..3000 {
            let timeout = Duration::from_micros(if i % 3 == 0 { 0 } else { 700 });
            if wait(&mut r, &w, timeout) {
                seen += 1;
                w.drain();
            } else {
                missed += 1;
            }
            assert_nothing_armed(&r, "a wait that raced a write");
            assert!(
                Instant::now() < deadline,
                "3000 short waits took over {TIMEOUT:?}"
            );
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        writer.join().unwrap();
        assert!(
            seen > 0 && missed > 0,
            "{seen} readable, {missed} timed out"
        );
        w.make_readable();
        assert!(wait(&mut r, &w, TIMEOUT), "a byte in the pipe was not seen");
    }
}

#[test]
fn a_closed_fd_is_the_polls_ebadf_and_leaves_nothing_armed() {
    let _fds = shared();
    for mut r in reactors() {
        // SAFETY: no process has this many fds open (RLIMIT_NOFILE's hard limit is far below), so
        // the number names no file; the kernel answers EBADF, which is what is tested.
        let closed = unsafe { BorrowedFd::borrow_raw(i32::MAX - 1) };
        assert_eq!(
            try_wait(&mut r, closed, Some(TIMEOUT)).err(),
            Some(fdkit::Error::Os(fdkit::Errno::BADF))
        );
        assert_nothing_armed(&r, "a wait on a closed fd");
        let w = watched_pipe();
        w.make_readable();
        assert!(wait(&mut r, &w, TIMEOUT), "the reactor is still usable");
    }
}

#[test]
fn a_reactor_built_in_one_thread_waits_in_others() {
    let _fds = shared();
    if !require_uring() {
        return;
    }
    // A loop may be run by one thread, then by another, and the thread that waited may exit.
    let w = std::sync::Arc::new(watched_pipe());
    let r = std::thread::spawn(|| Reactor::new(ReactorOptions::default()).expect("new"))
        .join()
        .unwrap();
    let mut r = {
        let w = w.clone();
        std::thread::spawn(move || {
            let mut r = r;
            assert!(!wait(&mut r, &w, Duration::from_millis(20)));
            w.make_readable();
            assert!(wait(&mut r, &w, TIMEOUT));
            assert_nothing_armed(&r, "a wait in a second thread");
            r
        })
        .join()
        .unwrap()
    };
    assert!(wait(&mut r, &w, TIMEOUT), "after the waiting thread exited");
    w.drain();
    assert!(!wait(&mut r, &w, Duration::from_millis(20)));
    assert_nothing_armed(&r, "a wait in a third thread");
}

#[test]
fn a_forked_childs_copy_refuses_to_wait_and_leaves_the_parents_ring_alone() {
    let _fds = shared();
    for mut r in reactors() {
        let w = watched_pipe();
        w.make_readable();
        assert!(!r.forked());
        // SAFETY: the child only calls what neither allocates nor takes a lock another thread of
        // the test harness could have held at the fork (an atomic load, a refusal, a drop that
        // leaks, _exit).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = if !r.forked() {
                1
            } else if !matches!(
                try_wait(&mut r, w.epoll.as_fd(), Some(Duration::ZERO)),
                Err(fdkit::Error::InvalidArgument(_))
            ) {
                2
            } else {
                drop(r); // must leak the parent's ring, not cancel or reap in it
                0
            };
            // SAFETY: ends the child at once, running no destructor or atexit handler of the
            // parent's state.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child's copy misbehaved: status {status:#x}"
        );
        assert!(
            wait(&mut r, &w, TIMEOUT),
            "the parent's ring after the fork"
        );
        w.drain();
        assert!(!wait(&mut r, &w, Duration::from_millis(20)));
        assert_nothing_armed(&r, "the parent's waits after the fork");
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn reactors_are_built_and_dropped_without_leaking_fds() {
    let _fds = exclusive();
    if !require_uring() {
        return;
    }
    let w = watched_pipe();
    let before = open_fds();
    let t = Instant::now();
    for i in 0..200 {
        // Reactor::new proves the ring usable (a no-op round trip) before returning it.
        let entries = if i % 2 == 0 { 8 } else { 1 };
        let mut r = Reactor::new(ReactorOptions {
            entries,
            ..ReactorOptions::DEFAULT
        })
        .expect("Reactor::new");
        assert!(r.ring_fd() >= 0 && !r.forked());
        assert_eq!(r.in_flight(), 0, "the no-op was reaped");
        assert!(!wait(&mut r, &w, Duration::ZERO));
        if i % 10 == 0 {
            // Dropped right after a wait that timed out: nothing to cancel, nothing leaks.
            assert!(!wait(&mut r, &w, Duration::from_millis(1)));
        }
    }
    assert!(t.elapsed() < TIMEOUT, "200 reactors took {:?}", t.elapsed());
    assert_eq!(open_fds(), before, "fds leaked by building reactors");
    for entries in [0, 32769] {
        assert!(
            matches!(
                Reactor::new(ReactorOptions {
                    entries,
                    ..ReactorOptions::DEFAULT
                }),
                Err(fdkit::Error::InvalidArgument(_))
            ),
            "entries = {entries}"
        );
    }
    assert_eq!(open_fds(), before, "fds leaked by reactors that failed");
    if armed_polls(&Reactor::new(ReactorOptions::default()).unwrap()).is_none() {
        skip("this kernel's fdinfo lists no PollList: armed polls were counted by the ring only");
    }
}

/// The reactor that reads epoll through the ring, or None (skipped) where the kernel lacks
/// `IORING_OP_EPOLL_WAIT`.
fn epoll_reader() -> Option<Reactor> {
    reactors().into_iter().find(Reactor::reads_epoll)
}

#[test]
fn the_rings_epoll_wait_returns_what_epoll_wait_returns() {
    let _fds = shared();
    let Some(mut r) = epoll_reader() else {
        return;
    };
    // Five pipes ready at once, read three at a time: the ring's answers are epoll_wait(2)'s
    // (same events, same order, `maxevents` obeyed), and taking them changes nothing in the
    // instance (level-triggered: they are reported again).
    let epoll = epoll::create(CreateFlags::CLOEXEC).unwrap();
    let pipes: Vec<_> = (0..5u64)
        .map(|i| {
            let (rd, wr) = fd::pipe2(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).unwrap();
            epoll::add(&epoll, &rd, EventData::new_u64(10 + i), EventFlags::IN).unwrap();
            fd::write(&wr, b"x").unwrap();
            (rd, wr)
        })
        .collect();
    let mut by_ring = Vec::new();
    let n = r
        .epoll_wait(epoll.as_fd(), &mut by_ring, 3, Some(TIMEOUT))
        .unwrap();
    assert_eq!(n, 3);
    let mut by_kernel: Vec<epoll::Event> = Vec::with_capacity(3);
    let (got, _) = epoll::wait(&epoll, by_kernel.spare_capacity_mut(), None).unwrap();
    let (ring, kernel): (Vec<_>, Vec<_>) = (
        by_ring.iter().map(|e| (e.data.u64(), e.flags)).collect(),
        got.iter().map(|e| (e.data.u64(), e.flags)).collect(),
    );
    assert_eq!(ring.len(), 3);
    assert!(ring.iter().all(|(_, f)| *f == EventFlags::IN));
    // epoll moves reported fds to the back of its ready list, so the kernel's next three are
    // the two the ring left and the first the ring took.
    let mut all: Vec<u64> = ring.iter().chain(&kernel).map(|(d, _)| *d).collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(
        all,
        vec![10, 11, 12, 13, 14],
        "ring {ring:?}, kernel {kernel:?}"
    );
    assert_eq!(kernel[2], ring[0], "ring {ring:?}, kernel {kernel:?}");
    assert_nothing_armed(&r, "an epoll wait that found events");
    drop(pipes);
}

#[test]
fn the_rings_epoll_wait_refuses_what_epoll_wait_refuses() {
    let _fds = shared();
    let Some(mut r) = epoll_reader() else {
        return;
    };
    let w = watched_pipe();
    let mut events = Vec::new();
    // Not an epoll instance: epoll_wait(2)'s EINVAL.
    assert_eq!(
        r.epoll_wait(w.rd.as_fd(), &mut events, 4, Some(TIMEOUT))
            .err(),
        Some(fdkit::Error::Os(fdkit::Errno::INVAL))
    );
    assert_nothing_armed(&r, "an epoll wait on a pipe");
    for max in [0, 1 << 31] {
        assert!(
            matches!(
                r.epoll_wait(w.epoll.as_fd(), &mut events, max, Some(TIMEOUT)),
                Err(fdkit::Error::InvalidArgument(_))
            ),
            "max_events = {max}"
        );
    }
    // A reactor told not to read epoll through the ring refuses to.
    let mut poll_only = Reactor::new(ReactorOptions {
        epoll_wait: false,
        ..ReactorOptions::DEFAULT
    })
    .unwrap();
    assert!(!poll_only.reads_epoll());
    assert!(matches!(
        poll_only.epoll_wait(w.epoll.as_fd(), &mut events, 4, Some(TIMEOUT)),
        Err(fdkit::Error::InvalidArgument(_))
    ));
    w.make_readable();
    assert_eq!(
        r.epoll_wait(w.epoll.as_fd(), &mut events, 4, Some(TIMEOUT)),
        Ok(1),
        "the reactor is still usable"
    );
}
