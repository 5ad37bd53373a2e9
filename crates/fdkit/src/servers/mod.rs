//! Servers whose hot loop never enters Python. They may use every other family; nothing uses
//! them.

mod nofile;
pub mod proxy;
pub mod static_files;
