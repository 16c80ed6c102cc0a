//! Entity id allocation with generations.
//!
//! Ids are small integers (so clients can index by them), reused lowest-first after they are
//! freed; every reuse bumps the id's generation, which travels in the entity record so that a
//! client never mistakes a new entity for the old one under the same id.

use std::collections::BTreeSet;

/// Allocates entity ids. Id 0 is never handed out (it means "none" on the wire).
#[derive(Debug, Default)]
pub struct EntityIds {
    /// Next never-used id.
    next: u32,
    /// Freed ids, reused lowest first (deterministic).
    free: BTreeSet<u32>,
    /// Generation per id, indexed by id.
    generations: Vec<u16>,
}

impl EntityIds {
    /// A fresh id and its generation.
    pub fn allocate(&mut self) -> (u32, u16) {
        let id = match self.free.pop_first() {
            Some(id) => id,
            None => {
                self.next += 1;
                self.next
            }
        };
        let idx = id as usize;
        if self.generations.len() <= idx {
            self.generations.resize(idx + 1, 0);
        }
        (id, self.generations[idx])
    }

    /// Free `id`; its next use carries the next generation.
    pub fn free(&mut self, id: u32) {
        if let Some(g) = self.generations.get_mut(id as usize) {
            *g = g.wrapping_add(1);
            self.free.insert(id);
        }
    }

    /// Take `id` with `generation` (restoring a saved state): it is no longer handed out until
    /// freed. Ids between the highest handed out and `id` become free. Id 0 is ignored.
    pub fn claim(&mut self, id: u32, generation: u16) {
        if id == 0 {
            return;
        }
        while self.next < id {
            self.next += 1;
            if self.next != id {
                self.free.insert(self.next);
            }
        }
        self.free.remove(&id);
        let idx = id as usize;
        if self.generations.len() <= idx {
            self.generations.resize(idx + 1, 0);
        }
        self.generations[idx] = generation;
    }

    /// Whether `id` may be claimed: never handed out, or freed.
    pub fn is_free(&self, id: u32) -> bool {
        id != 0 && (id > self.next || self.free.contains(&id))
    }

    /// The current generation of `id` (0 for an id never allocated).
    pub fn generation(&self, id: u32) -> u16 {
        self.generations.get(id as usize).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_bumps_generation() {
        let mut ids = EntityIds::default();
        assert_eq!(ids.allocate(), (1, 0));
        assert_eq!(ids.allocate(), (2, 0));
        ids.free(1);
        assert_eq!(ids.allocate(), (1, 1));
        assert_eq!(ids.allocate(), (3, 0));
        assert_eq!(ids.generation(1), 1);
    }

    #[test]
    fn claim_takes_an_exact_id() {
        let mut ids = EntityIds::default();
        ids.claim(3, 7);
        assert_eq!(ids.generation(3), 7);
        assert_eq!(ids.allocate(), (1, 0));
        assert_eq!(ids.allocate(), (2, 0));
        assert_eq!(ids.allocate(), (4, 0));
    }
}
