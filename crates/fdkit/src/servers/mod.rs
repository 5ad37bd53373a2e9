//! Servers whose hot loop never enters Python. They may use every other family; nothing uses
//! them.

pub mod proxy;
pub mod static_files;
