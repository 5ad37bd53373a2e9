//! `fdkit.fd`: the fd-native syscalls on plain integer fds, as `os` and `socket` offer them
//! (ints in, ints out; the caller owns every fd), with the GIL released around each call that
//! can wait. One file per job: sockets, accepting, socket options, reading and writing,
//! datagrams and ancillary data (`msg`),
//! files and flags, temporaries, file status, poll, and the address spellings they share.

pub mod accept;
pub mod addr;
pub mod files;
pub mod io;
pub mod msg;
pub mod poll;
pub mod socket;
pub mod sockopt;
pub mod stat;
pub mod temp;
