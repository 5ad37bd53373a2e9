//! Probing io_uring once: is it usable here, and which operations does the kernel know?
//!
//! io_uring can be missing (old kernel, compiled out: `ENOSYS`), forbidden (a seccomp filter in
//! a container, or `kernel.io_uring_disabled`: `EPERM`), or present with only some opcodes. A
//! caller picks its engine from this answer instead of failing mid-flight.

use super::setup::Setup;
use io_uring::{opcode, IoUring, Probe};
use rustix::io::Errno;

/// One opcode and whether this kernel supports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpSupport {
    /// The operation's name as fdkit spells it (`"accept"`, `"splice"`, …).
    pub name: &'static str,
    /// Whether `IORING_REGISTER_PROBE` lists it as supported.
    pub supported: bool,
}

/// The probe's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Availability {
    /// Whether a ring could be set up at all.
    pub available: bool,
    /// Why not, when it could not (names the errno and its likely cause).
    pub reason: Option<String>,
    /// The opcodes fdkit uses, each with its support.
    pub ops: Vec<OpSupport>,
    /// Whether `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN` rings can be built
    /// (Linux 6.1+): the fast setup for one-thread servers.
    pub defer_taskrun: bool,
    /// Whether `IOSQE_CQE_SKIP_SUCCESS` works (`IORING_FEAT_CQE_SKIP`, Linux 5.17): the
    /// `skip_success` flag.
    pub skip_success: bool,
}

/// The opcodes fdkit's ring and servers use, by name.
const OPS: &[(&str, u8)] = &[
    ("nop", opcode::Nop::CODE),
    ("socket", opcode::Socket::CODE),
    ("accept", opcode::Accept::CODE),
    ("connect", opcode::Connect::CODE),
    ("recv", opcode::Recv::CODE),
    ("send", opcode::Send::CODE),
    ("send_zc", opcode::SendZc::CODE),
    ("read", opcode::Read::CODE),
    ("write", opcode::Write::CODE),
    ("splice", opcode::Splice::CODE),
    ("tee", opcode::Tee::CODE),
    ("shutdown", opcode::Shutdown::CODE),
    ("close", opcode::Close::CODE),
    ("poll_add", opcode::PollAdd::CODE),
    ("timeout", opcode::Timeout::CODE),
    ("cancel", opcode::AsyncCancel::CODE),
    ("provide_buffers", opcode::ProvideBuffers::CODE),
    ("link_timeout", opcode::LinkTimeout::CODE),
    ("openat", opcode::OpenAt::CODE),
    ("statx", opcode::Statx::CODE),
    ("fsync", opcode::Fsync::CODE),
    ("sendmsg", opcode::SendMsg::CODE),
    ("recvmsg", opcode::RecvMsg::CODE),
    ("read_fixed", opcode::ReadFixed::CODE),
    ("write_fixed", opcode::WriteFixed::CODE),
];

/// Sets up a small ring, asks the kernel which opcodes it supports (`IORING_REGISTER_PROBE`),
/// submits and reaps a no-op through io_uring_enter(2), and tries the `DEFER_TASKRUN` setup.
/// io_uring counts as available only when all three syscalls answer: a seccomp filter may deny
/// io_uring_enter(2) or io_uring_register(2) alone, and a ring that can be set up but never
/// entered serves nobody. See io_uring_setup(2), io_uring_register(2), io_uring_enter(2).
pub fn probe() -> Availability {
    let unavailable = |reason: String| Availability {
        available: false,
        reason: Some(reason),
        ops: OPS
            .iter()
            .map(|&(name, _)| OpSupport {
                name,
                supported: false,
            })
            .collect(),
        defer_taskrun: false,
        skip_success: false,
    };
    let plain = Setup::new(2).defer_taskrun(Some(false)).submit_all(false);
    let mut ring = match plain.build() {
        Ok(built) => built.ring,
        Err(e) => return unavailable(explain(e)),
    };
    let probe = match register_probe(&ring) {
        Ok(p) => p,
        Err(e) => return unavailable(explain_call("io_uring_register", &e)),
    };
    if let Err(e) = nop_round_trip(&mut ring) {
        return unavailable(explain_call("io_uring_enter", &e));
    }
    let skip_success = ring.params().is_feature_skip_cqe_on_success();
    let ops = OPS
        .iter()
        .map(|&(name, code)| OpSupport {
            name,
            supported: probe.is_supported(code),
        })
        .collect();
    let defer_taskrun = Setup::new(2)
        .defer_taskrun(Some(true))
        .submit_all(false)
        .build()
        .is_ok();
    Availability {
        available: true,
        reason: None,
        ops,
        defer_taskrun,
        skip_success,
    }
}

/// Submits a no-op and waits for its completion: proof that io_uring_enter(2) is allowed.
fn nop_round_trip(ring: &mut IoUring) -> std::io::Result<()> {
    let nop = opcode::Nop::new().build().user_data(0);
    // SAFETY: a no-op references no memory; the ring outlives its completion, reaped below.
    unsafe { ring.submission().push(&nop) }
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EBUSY))?;
    ring.submit_and_wait(1)?;
    ring.completion().for_each(drop);
    Ok(())
}

/// Why io_uring is unusable when `call` (a syscall after a successful setup) failed with `e`.
fn explain_call(call: &str, e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => format!(
            "{call}: {} (denied: a seccomp filter or a security module allows \
             io_uring_setup but not {call})",
            errno_name(e)
        ),
        Some(libc::ENOSYS) => format!("{call}: ENOSYS (refused by a seccomp filter)"),
        _ => format!("{call}: {e}"),
    }
}

fn errno_name(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM) => "EPERM",
        Some(libc::EACCES) => "EACCES",
        _ => "error",
    }
}

/// `IORING_REGISTER_PROBE`: the opcodes `ring`'s kernel supports. See io_uring_register(2).
pub(crate) fn register_probe(ring: &IoUring) -> std::io::Result<Probe> {
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    Ok(probe)
}

/// The first of `ops` (name, opcode) that `ring`'s kernel lacks, if any; the error of
/// `IORING_REGISTER_PROBE` itself when it fails.
pub(crate) fn missing_op(
    ring: &IoUring,
    ops: &[(&'static str, u8)],
) -> std::io::Result<Option<&'static str>> {
    let probe = register_probe(ring)?;
    Ok(ops
        .iter()
        .find(|&&(_, code)| !probe.is_supported(code))
        .map(|&(name, _)| name))
}

/// Why io_uring cannot be set up here, for a setup that failed with `e`: names the errno
/// and its likely cause (the sysctl, a seccomp filter, an old kernel).
pub(crate) fn explain(e: Errno) -> String {
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .map(|s| s.trim().to_owned());
    match e {
        // qemu-user passes syscalls through but not io_uring's: the same ENOSYS.
        Errno::NOSYS => "io_uring_setup: ENOSYS (kernel too old or built without io_uring, \
                         or run by an emulator such as qemu-user)"
            .into(),
        Errno::PERM => match disabled.as_deref() {
            Some("2") => "io_uring_setup: EPERM (sysctl kernel.io_uring_disabled=2)".into(),
            Some("1") => "io_uring_setup: EPERM (sysctl kernel.io_uring_disabled=1 and this \
                          process is not in kernel.io_uring_group)"
                .into(),
            _ => "io_uring_setup: EPERM (blocked by a seccomp filter or a security module)".into(),
        },
        _ => format!("io_uring_setup: {}", std::io::Error::from(e)),
    }
}
