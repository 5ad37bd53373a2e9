//! [`Lru`]: a map that remembers the order of use, for the open-file cache: a hit moves its
//! entry to the front (O(1)), and eviction takes from the back, the least recently used.
//!
//! The order is a doubly linked list threaded through a vector of nodes by index (no
//! pointers, no `unsafe`); freed nodes are reused.
//!
//! The index hashes with FxHash, not SipHash: its keys are the paths of files that opened
//! under the root (a request for a missing file inserts nothing), so a client cannot choose
//! keys that collide, and a hit costs a few instructions instead of a keyed hash.

use rustc_hash::FxHashMap as HashMap;
use std::borrow::Borrow;
use std::hash::Hash;

const NIL: usize = usize::MAX;

struct Node<K, V> {
    key: K,
    val: V,
    /// Toward the front (more recently used).
    prev: usize,
    /// Toward the back (less recently used).
    next: usize,
}

pub(super) struct Lru<K, V> {
    index: HashMap<K, usize>,
    nodes: Vec<Option<Node<K, V>>>,
    free: Vec<usize>,
    head: usize,
    tail: usize,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    pub fn new() -> Self {
        Lru {
            index: HashMap::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    fn node(&mut self, i: usize) -> &mut Node<K, V> {
        self.nodes[i].as_mut().expect("linked node")
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = {
            let n = self.node(i);
            (n.prev, n.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.node(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.node(next).prev = prev;
        }
    }

    fn link_front(&mut self, i: usize) {
        let old = self.head;
        {
            let n = self.node(i);
            n.prev = NIL;
            n.next = old;
        }
        if old == NIL {
            self.tail = i;
        } else {
            self.node(old).prev = i;
        }
        self.head = i;
    }

    /// The value for `key`, which becomes the most recently used.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let i = *self.index.get(key)?;
        if self.head != i {
            self.unlink(i);
            self.link_front(i);
        }
        Some(&mut self.node(i).val)
    }

    /// Stores `val` under `key` as the most recently used; returns the value it replaces.
    pub fn insert(&mut self, key: K, val: V) -> Option<V> {
        let old = self.remove(&key);
        let node = Node {
            key: key.clone(),
            val,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = Some(node);
                i
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        };
        self.link_front(i);
        self.index.insert(key, i);
        old
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let i = self.index.remove(key)?;
        Some(self.take(i))
    }

    fn take(&mut self, i: usize) -> V {
        self.unlink(i);
        let node = self.nodes[i].take().expect("linked node");
        self.free.push(i);
        node.val
    }

    /// Removes and returns the least recently used entry (the cache evicts with
    /// [`evict_where`](Self::evict_where), which can skip entries in use).
    #[cfg(test)]
    pub fn pop_lru(&mut self) -> Option<(K, V)> {
        if self.tail == NIL {
            return None;
        }
        let i = self.tail;
        let key = self.node(i).key.clone();
        self.index.remove(&key);
        Some((key, self.take(i)))
    }

    /// Removes up to `max` entries for which `pred` holds, least recently used first, and
    /// hands each to `out`; returns how many. Entries `pred` refuses keep their place.
    pub fn evict_where(
        &mut self,
        max: usize,
        mut pred: impl FnMut(&V) -> bool,
        mut out: impl FnMut(V),
    ) -> usize {
        let mut done = 0;
        let mut i = self.tail;
        while i != NIL && done < max {
            let (prev, yes) = {
                let n = self.node(i);
                (n.prev, pred(&n.val))
            };
            if yes {
                let key = self.node(i).key.clone();
                self.index.remove(&key);
                out(self.take(i));
                done += 1;
            }
            i = prev;
        }
        done
    }

    /// Whether `key` is cached, without touching the order (for tests).
    #[cfg(test)]
    pub fn index_has<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.index.contains_key(key)
    }

    /// The keys from the most to the least recently used (for tests).
    #[cfg(test)]
    fn order(&self) -> Vec<K> {
        let mut out = Vec::new();
        let mut i = self.head;
        while i != NIL {
            let n = self.nodes[i].as_ref().expect("linked node");
            out.push(n.key.clone());
            i = n.next;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Lru;

    fn lru(keys: &[u32]) -> Lru<u32, u32> {
        let mut l = Lru::new();
        for &k in keys {
            l.insert(k, k * 10);
        }
        l
    }

    #[test]
    fn insert_puts_in_front_and_pop_takes_the_oldest() {
        let mut l = lru(&[1, 2, 3]);
        assert_eq!(l.order(), [3, 2, 1]);
        assert_eq!(l.pop_lru(), Some((1, 10)));
        assert_eq!(l.pop_lru(), Some((2, 20)));
        assert_eq!(l.len(), 1);
        assert_eq!(l.pop_lru(), Some((3, 30)));
        assert_eq!(l.pop_lru(), None);
        assert_eq!(l.len(), 0);
    }

    #[test]
    fn a_hit_moves_to_the_front() {
        let mut l = lru(&[1, 2, 3, 4]);
        assert_eq!(l.get_mut(&2).copied(), Some(20));
        assert_eq!(l.order(), [2, 4, 3, 1]);
        assert_eq!(l.get_mut(&1).copied(), Some(10));
        assert_eq!(l.order(), [1, 2, 4, 3]);
        assert_eq!(l.get_mut(&1).copied(), Some(10)); // already in front
        assert_eq!(l.order(), [1, 2, 4, 3]);
        assert!(l.get_mut(&9).is_none());
        assert_eq!(l.pop_lru(), Some((3, 30)));
    }

    #[test]
    fn insert_over_a_key_replaces_and_moves_it() {
        let mut l = lru(&[1, 2, 3]);
        assert_eq!(l.insert(1, 11), Some(10));
        assert_eq!(l.order(), [1, 3, 2]);
        assert_eq!(l.len(), 3);
    }

    #[test]
    fn remove_unlinks_from_anywhere_and_nodes_are_reused() {
        let mut l = lru(&[1, 2, 3, 4, 5]);
        assert_eq!(l.remove(&3), Some(30)); // middle
        assert_eq!(l.remove(&5), Some(50)); // head
        assert_eq!(l.remove(&1), Some(10)); // tail
        assert_eq!(l.remove(&1), None);
        assert_eq!(l.order(), [4, 2]);
        l.insert(6, 60);
        l.insert(7, 70);
        l.insert(8, 80);
        assert_eq!(l.nodes.len(), 5, "freed nodes are reused");
        assert_eq!(l.order(), [8, 7, 6, 4, 2]);
    }

    #[test]
    fn evict_where_skips_what_it_must_keep() {
        let mut l = lru(&[1, 2, 3, 4, 5, 6]);
        let mut out = Vec::new();
        // Odd values are "in use": only even keys go, oldest first, at most two.
        let n = l.evict_where(2, |v| (v / 10) % 2 == 0, |v| out.push(v));
        assert_eq!(n, 2);
        assert_eq!(out, [20, 40]);
        assert_eq!(l.order(), [6, 5, 3, 1]);
        let n = l.evict_where(10, |_| false, |_| unreachable!());
        assert_eq!(n, 0);
        assert_eq!(l.len(), 4);
    }

    #[test]
    fn a_long_mixed_run_keeps_index_and_list_in_step() {
        // A deterministic mix of inserts, hits, removals and pops against a plain model.
        let mut l: Lru<u32, u32> = Lru::new();
        let mut model: Vec<u32> = Vec::new(); // front first
        let mut x = 12345u32;
        for _ in 0..20_000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let k = (x >> 16) % 64;
            match (x >> 8) % 4 {
                0 => {
                    l.insert(k, k);
                    model.retain(|&m| m != k);
                    model.insert(0, k);
                }
                1 => {
                    let hit = l.get_mut(&k).is_some();
                    assert_eq!(hit, model.contains(&k));
                    if hit {
                        model.retain(|&m| m != k);
                        model.insert(0, k);
                    }
                }
                2 => {
                    assert_eq!(l.remove(&k).is_some(), model.contains(&k));
                    model.retain(|&m| m != k);
                }
                _ => assert_eq!(l.pop_lru().map(|(k, _)| k), model.pop()),
            }
            assert_eq!(l.len(), model.len());
        }
        assert_eq!(l.order(), model);
    }
}
