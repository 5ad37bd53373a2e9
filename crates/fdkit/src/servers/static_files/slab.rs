//! [`Slab`]: connections by index, with a generation that changes when a slot is reused, so an
//! event or completion meant for a closed connection is recognised and dropped.

pub(super) struct Slot<T> {
    pub gen: u32,
    pub val: Option<Box<T>>,
}

pub(super) struct Slab<T> {
    pub slots: Vec<Slot<T>>,
    free: Vec<usize>,
}

impl<T> Slab<T> {
    pub fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Stores `val`; returns its index and generation.
    pub fn insert(&mut self, val: T) -> (usize, u32) {
        let idx = match self.free.pop() {
            Some(idx) => idx,
            None => {
                self.slots.push(Slot { gen: 0, val: None });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[idx];
        slot.val = Some(Box::new(val));
        (idx, slot.gen)
    }

    /// The value at `idx` if its generation is `gen`.
    pub fn get_mut(&mut self, idx: usize, gen: u32) -> Option<&mut T> {
        match self.slots.get_mut(idx) {
            Some(slot) if slot.gen == gen => slot.val.as_deref_mut(),
            _ => None,
        }
    }

    /// Takes the value out and retires the generation.
    pub fn remove(&mut self, idx: usize) -> Option<Box<T>> {
        let slot = self.slots.get_mut(idx)?;
        let val = slot.val.take()?;
        slot.gen = slot.gen.wrapping_add(1);
        self.free.push(idx);
        Some(val)
    }
}
