//! Nearest-N interest management on an rstar R-tree.
//!
//! Performance: runs every broadcast tick. The tree is bulk-loaded once per broadcast from the
//! avatars' positions (one allocation, O(N log N)); each viewer then walks the nearest-neighbour
//! iterator up to its cap. Ties at equal distance are broken by entity id, so the result is a
//! pure function of the positions: the same inputs give the same interest sets.
//!
//! This module does not decide what is sent; it only answers "who does this viewer see, and in
//! which distance band".

use rstar::{AABB, PointDistance, RTree, RTreeObject};

/// Distance bands (metres) that set an entity's tier for a viewer: tier 0 within the first band,
/// tier 3 beyond the last.
pub const DEFAULT_TIER_BANDS_M: [f32; 3] = [12.0, 30.0, 60.0];

/// One avatar in the index.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Point {
    id: u32,
    pos: [f32; 3],
}

impl RTreeObject for Point {
    type Envelope = AABB<[f32; 3]>;

    fn envelope(&self) -> Self::Envelope {
        AABB::from_point(self.pos)
    }
}

impl PointDistance for Point {
    fn distance_2(&self, point: &[f32; 3]) -> f32 {
        let dx = self.pos[0] - point[0];
        let dy = self.pos[1] - point[1];
        let dz = self.pos[2] - point[2];
        dx * dx + dy * dy + dz * dz
    }
}

/// A viewer's interest: who it sees, with each entity's tier.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InterestSet {
    /// `(entity id, tier)` sorted by entity id.
    pub entries: Vec<(u32, u8)>,
}

/// The spatial index of one broadcast tick.
#[derive(Debug, Default)]
pub struct InterestIndex {
    tree: RTree<Point>,
    bands_sq: [f32; 3],
}

impl InterestIndex {
    /// Builds the index from `(entity id, position)` pairs.
    pub fn build(points: impl IntoIterator<Item = (u32, [f32; 3])>, bands_m: [f32; 3]) -> Self {
        let pts: Vec<Point> = points
            .into_iter()
            .map(|(id, pos)| Point { id, pos })
            .collect();
        Self {
            tree: RTree::bulk_load(pts),
            bands_sq: bands_m.map(|b| b * b),
        }
    }

    /// Number of indexed entities.
    pub fn len(&self) -> usize {
        self.tree.size()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.tree.size() == 0
    }

    /// The tier of an entity at squared distance `d2` from the viewer.
    pub fn tier_of(&self, d2: f32) -> u8 {
        self.bands_sq.iter().position(|b| d2 <= *b).unwrap_or(3) as u8
    }

    /// The `cap` nearest entities to `at`, excluding `viewer`, ties broken by id, written into
    /// `out` sorted by id.
    pub fn nearest(&self, viewer: u32, at: [f32; 3], cap: usize, out: &mut InterestSet) {
        out.entries.clear();
        if cap == 0 {
            return;
        }
        let mut picked: Vec<(f32, u32)> = Vec::with_capacity(cap.min(self.len()));
        let mut iter = self.tree.nearest_neighbor_iter_with_distance_2(at);
        // Take `cap` entries, then keep taking while the distance equals the cap-th distance, so
        // that ties at the boundary are resolved by id and not by tree layout.
        let mut boundary: Option<f32> = None;
        for (p, d2) in iter.by_ref() {
            if p.id == viewer {
                continue;
            }
            if boundary.is_some_and(|b| d2 > b) {
                break;
            }
            picked.push((d2, p.id));
            if picked.len() == cap && boundary.is_none() {
                boundary = Some(d2);
            }
        }
        if picked.len() > cap {
            picked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            picked.truncate(cap);
        }
        out.entries
            .extend(picked.iter().map(|(d2, id)| (*id, self.tier_of(*d2))));
        out.entries.sort_unstable_by_key(|e| e.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_excludes_viewer_and_caps() {
        let idx = InterestIndex::build(
            (0..10u32).map(|i| (i, [i as f32, 0.0, 0.0])),
            DEFAULT_TIER_BANDS_M,
        );
        let mut set = InterestSet::default();
        idx.nearest(0, [0.0, 0.0, 0.0], 3, &mut set);
        assert_eq!(set.entries, vec![(1, 0), (2, 0), (3, 0)]);
    }

    #[test]
    fn ties_are_broken_by_id() {
        // Four entities at the same distance from the viewer; a cap of 2 must pick the two
        // lowest ids whatever the insertion order.
        let pts = vec![
            (40, [1.0, 0.0, 0.0]),
            (10, [-1.0, 0.0, 0.0]),
            (30, [0.0, 0.0, 1.0]),
            (20, [0.0, 0.0, -1.0]),
            (1, [0.0, 0.0, 0.0]),
        ];
        let idx = InterestIndex::build(pts, DEFAULT_TIER_BANDS_M);
        let mut set = InterestSet::default();
        idx.nearest(1, [0.0, 0.0, 0.0], 2, &mut set);
        assert_eq!(set.entries, vec![(10, 0), (20, 0)]);
    }

    #[test]
    fn tiers_follow_distance_bands() {
        let idx = InterestIndex::build(
            vec![
                (1, [0.0; 3]),
                (2, [5.0, 0.0, 0.0]),
                (3, [20.0, 0.0, 0.0]),
                (4, [100.0, 0.0, 0.0]),
            ],
            DEFAULT_TIER_BANDS_M,
        );
        let mut set = InterestSet::default();
        idx.nearest(1, [0.0; 3], 10, &mut set);
        assert_eq!(set.entries, vec![(2, 0), (3, 1), (4, 3)]);
    }
}
