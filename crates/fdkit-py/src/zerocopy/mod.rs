//! `fdkit.zerocopy`: moving bytes between fds inside the kernel. `transfer` picks the path
//! (copy_file_range, sendfile, splice) and falls back; `relay` holds `proxy` and `relay`,
//! which move socket traffic through pipes; `pipe` is `Pipe`, a pipe pair to splice and tee
//! by hand.

pub mod pipe;
pub mod relay;
pub mod transfer;
