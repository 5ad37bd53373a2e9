//! [`Clock`]: the loop's idea of now, and the `Date` header text, formatted once a second.

use crate::http::{format_http_date, HTTP_DATE_LEN};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Monotonic now for deadlines, wall-clock seconds for `Date`.
pub(super) struct Clock {
    pub now: Instant,
    /// Wall-clock seconds since the epoch.
    pub secs: u64,
    pub date: [u8; HTTP_DATE_LEN],
}

impl Clock {
    pub fn new() -> Clock {
        let mut c = Clock {
            now: Instant::now(),
            secs: u64::MAX,
            date: [0; HTTP_DATE_LEN],
        };
        c.tick();
        c
    }

    /// Reads both clocks (vDSO calls, no syscall); reformats `date` when the second changed.
    pub fn tick(&mut self) {
        self.now = Instant::now();
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if secs != self.secs {
            self.secs = secs;
            self.date = format_http_date(secs);
        }
    }
}
