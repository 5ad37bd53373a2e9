//! [`Interest`]: what a readiness registration waits for, in asyncio's mask and poll(2)'s bits.

use rustix::event::PollFlags;

/// Readiness as asyncio's selectors name it (`EVENT_READ` = 1, `EVENT_WRITE` = 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Interest {
    /// Wants (or got) readability: data, EOF, a pending connection, an error.
    pub read: bool,
    /// Wants (or got) writability: room in the send buffer, a finished connect, an error.
    pub write: bool,
}

impl Interest {
    /// From asyncio's mask (`1` read, `2` write).
    pub fn from_mask(mask: u32) -> Interest {
        Interest {
            read: mask & 1 != 0,
            write: mask & 2 != 0,
        }
    }

    /// As asyncio's mask.
    pub fn mask(self) -> u32 {
        u32::from(self.read) | (u32::from(self.write) << 1)
    }

    /// The poll(2) events that answer this interest.
    pub(super) fn poll_flags(self) -> PollFlags {
        let mut f = PollFlags::empty();
        if self.read {
            f |= PollFlags::IN | PollFlags::PRI | PollFlags::RDHUP;
        }
        if self.write {
            f |= PollFlags::OUT;
        }
        f
    }

    /// What of this interest the poll(2) result `got` satisfies: an error or a hang-up
    /// satisfies all of it, so the handler finds out by trying.
    pub(super) fn answered_by(self, got: PollFlags) -> Interest {
        let trouble = got.intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL);
        Interest {
            read: self.read
                && (trouble || got.intersects(PollFlags::IN | PollFlags::PRI | PollFlags::RDHUP)),
            write: self.write && (trouble || got.contains(PollFlags::OUT)),
        }
    }

    /// Whether it asks for nothing.
    pub fn is_empty(self) -> bool {
        !self.read && !self.write
    }
}
