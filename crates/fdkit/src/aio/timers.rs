//! [`TimerHeap`]: asyncio's timer heap, in Rust, popping in exactly the order asyncio's does.
//!
//! asyncio keeps its `TimerHandle`s in a list ordered by `heapq`, comparing only `when`; two
//! timers due at the same instant come out in whatever order `heapq`'s algorithm leaves them.
//! A loop that must behave as asyncio's cannot use another heap (a stable one would run such
//! timers in another order), so this is `heapq`'s own algorithm (`_siftdown`, `_siftup`,
//! `heapify` of CPython's `Lib/heapq.py`), over `(when, T)` with `<` on `when` alone.
//! See CPython's `Modules/_heapqmodule.c`, which the Python version mirrors.

/// A min-heap of `(when, item)` in `heapq`'s layout: `heappush`, `heappop` and `heapify` leave
/// the entries where `heapq` would, so pops come out in the same order.
#[derive(Debug)]
pub struct TimerHeap<T> {
    heap: Vec<(f64, T)>,
}

impl<T> Default for TimerHeap<T> {
    fn default() -> Self {
        TimerHeap { heap: Vec::new() }
    }
}

impl<T> TimerHeap<T> {
    /// An empty heap.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many entries it holds (cancelled ones included, as asyncio's list does).
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The entry that pops next.
    pub fn peek(&self) -> Option<&(f64, T)> {
        self.heap.first()
    }

    /// `heapq.heappush`.
    pub fn push(&mut self, when: f64, item: T) {
        self.heap.push((when, item));
        let last = self.heap.len() - 1;
        self.sift_down(0, last);
    }

    /// `heapq.heappop`.
    pub fn pop(&mut self) -> Option<(f64, T)> {
        let last = self.heap.pop()?;
        if self.heap.is_empty() {
            return Some(last);
        }
        let top = std::mem::replace(&mut self.heap[0], last);
        self.sift_up(0);
        Some(top)
    }

    /// The entries in the heap's own order (what asyncio's `_scheduled` list shows).
    pub fn iter(&self) -> impl Iterator<Item = &(f64, T)> {
        self.heap.iter()
    }

    /// Keeps the entries `keep` accepts, handing the others to `removed`, then `heapq.heapify`:
    /// asyncio's clean-up of a heap mostly made of cancelled timers.
    pub fn retain_heapify(&mut self, mut keep: impl FnMut(&T) -> bool, mut removed: impl FnMut(T)) {
        let old = std::mem::take(&mut self.heap);
        for (when, item) in old {
            if keep(&item) {
                self.heap.push((when, item));
            } else {
                removed(item);
            }
        }
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_up(i);
        }
    }

    /// Takes every entry out (asyncio's `close()` clears its list), in heap order.
    pub fn drain(&mut self) -> Vec<(f64, T)> {
        std::mem::take(&mut self.heap)
    }

    /// `heapq._siftdown`: the entry at `pos` moves up towards `start` past larger parents.
    fn sift_down(&mut self, start: usize, mut pos: usize) {
        while pos > start {
            let parent = (pos - 1) >> 1;
            if self.heap[pos].0 < self.heap[parent].0 {
                self.heap.swap(pos, parent);
                pos = parent;
            } else {
                break;
            }
        }
    }

    /// `heapq._siftup`: the smaller child bubbles up to a leaf, then `_siftdown` places the
    /// entry that started at `pos` (Floyd's method, as heapq does it).
    // `!(a < b)`, not `a >= b`: heapq's test, which differs for NaN `when`s.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    fn sift_up(&mut self, mut pos: usize) {
        let end = self.heap.len();
        let start = pos;
        let mut child = 2 * pos + 1;
        while child < end {
            let right = child + 1;
            if right < end && !(self.heap[child].0 < self.heap[right].0) {
                child = right;
            }
            self.heap.swap(pos, child);
            pos = child;
            child = 2 * pos + 1;
        }
        self.sift_down(start, pos);
    }
}

#[cfg(test)]
mod tests {
    use super::TimerHeap;

    #[test]
    fn pops_in_when_order() {
        let mut h = TimerHeap::new();
        for (i, w) in [5.0, 1.0, 3.0, 2.0, 4.0].into_iter().enumerate() {
            h.push(w, i);
        }
        let order: Vec<f64> = std::iter::from_fn(|| h.pop()).map(|(w, _)| w).collect();
        assert_eq!(order, [1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    /// Equal `when`s come out in heapq's order, not insertion order: pushes of 0..5 all at
    /// 1.0 pop as `heapq` pops them (checked against CPython 3.11: 0, 2, 4, 1, 3).
    #[test]
    fn equal_whens_pop_as_heapq_pops_them() {
        let mut h = TimerHeap::new();
        for i in 0..5 {
            h.push(1.0, i);
        }
        let order: Vec<i32> = std::iter::from_fn(|| h.pop()).map(|(_, i)| i).collect();
        assert_eq!(order, [0, 2, 4, 1, 3]);
    }

    #[test]
    fn retain_heapify_keeps_order_of_the_rest() {
        let mut h = TimerHeap::new();
        for i in 0..10 {
            h.push(f64::from(10 - i), i);
        }
        let mut gone = Vec::new();
        h.retain_heapify(|i| i % 2 == 0, |i| gone.push(i));
        gone.sort_unstable();
        assert_eq!(gone, [1, 3, 5, 7, 9]);
        let order: Vec<i32> = std::iter::from_fn(|| h.pop()).map(|(_, i)| i).collect();
        assert_eq!(order, [8, 6, 4, 2, 0]);
    }
}
