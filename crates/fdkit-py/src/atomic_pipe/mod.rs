//! `fdkit.atomic_pipe`: whole messages from many writers over one pipe, in Perl
//! Atomic::Pipe's wire format. `pipe` is the Python class, `state` the end it owns and how
//! it is kept and released, `ends` the whole new pipe (`AtomicPipe.new()`), `read` what a read waits for and returns, `options` the keyword
//! options, `protocol_error` the exception for a broken stream, `fork_safe_lock` the lock a
//! fork cannot leave stuck. See pipe(7) on `PIPE_BUF` atomicity.

use crate::args::Seconds;

mod ends;
mod fork_safe_lock;
mod options;
mod pipe;
mod protocol_error;
mod read;
mod state;

pub use ends::AtomicPipeEnds;
pub use pipe::AtomicPipe;
pub use protocol_error::ProtocolError;
pub use read::decompressed_type;

/// Every `timeout` an `AtomicPipe` takes: 0 does not wait, `inf` (anything past ~292 years)
/// waits forever, None waits as the fd's mode says (see each method).
const TIMEOUT: Seconds = Seconds::wait_or_forever("timeout");
