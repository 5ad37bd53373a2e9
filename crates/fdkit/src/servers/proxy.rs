//! The forwarding proxy behind `fdkit proxy` (being written).
