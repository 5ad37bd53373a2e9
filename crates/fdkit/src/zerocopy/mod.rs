//! Zero-copy transfers (being written).
