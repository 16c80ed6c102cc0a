//! Nearest-N interest management on an rstar R-tree.
//!
//! Performance: the tree is bulk-loaded once per broadcast from the avatars' positions (one
//! allocation, O(N log N)). A viewer's query is a bounded-radius search (no priority queue; the
//! tree is searched with the ball's bounding box, cheaper per node than a distance search, and
//! the box's points are kept when inside the ball): the radius starts from the room's average
//! density so that about `1.5 × cap` avatars fall inside it, grows by 1.5× until at least `cap`
//! others are inside (or the whole room is), and the `cap` nearest are selected from that
//! candidate list in O(candidates). Ties at equal distance are broken by entity id, so the
//! result is a pure function of the positions: the same inputs give the same interest sets, and
//! the set equals "sort everyone by (distance, id), keep the first `cap`".
//!
//! This module does not decide what is sent, nor how often a viewer's set is recomputed (the
//! room does); it only answers "who does this viewer see, and in which distance band".

use rstar::{AABB, PointDistance, RTree, RTreeObject};

/// Distance bands (metres) that set an entity's tier for a viewer: tier 0 within the first band,
/// tier 3 beyond the last.
pub const DEFAULT_TIER_BANDS_M: [f32; 3] = [12.0, 30.0, 60.0];

/// A viewer's interest set is recomputed every this many broadcasts (staggered by entity id, so
/// a quarter of the viewers query per broadcast); in between it keeps the avatars it saw, minus
/// those that left, with tiers from their current distance. A newcomer is seen by the others
/// within this many broadcasts (200 ms at 20 Hz). Rooms small enough that everyone sees everyone
/// recompute every broadcast.
pub const REFRESH_EVERY: u64 = 4;

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
#[derive(Clone, Debug, Default)]
pub struct InterestSet {
    /// `(entity id, tier)` sorted by entity id.
    pub entries: Vec<(u32, u8)>,
    /// Reused candidate list `(squared distance, id)` of the last query.
    scratch: Vec<(f32, u32)>,
}

impl PartialEq for InterestSet {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}

/// The spatial index of one broadcast tick.
#[derive(Debug, Default)]
pub struct InterestIndex {
    tree: RTree<Point>,
    bands_sq: [f32; 3],
    /// Bounding box of the indexed positions (min, max).
    bounds: ([f32; 3], [f32; 3]),
    /// Indexed entities per square metre of the box's horizontal extent (at least one box of
    /// 1 m²), for the first search radius.
    density: f32,
}

/// The tier of squared distance `d2` in the squared bands `bands_sq`: the index of the first band
/// that holds it, 3 beyond the last. Branch-free for ascending bands (tiers of neighbours vary at
/// random, so a branch per band would mispredict).
#[inline]
// `!(d2 <= x)` on purpose: a NaN distance is beyond every band, as in the branching form.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub fn tier_in(bands_sq: &[f32; 3], d2: f32) -> u8 {
    let [a, b, c] = *bands_sq;
    if a <= b && b <= c {
        u8::from(!(d2 <= a)) + u8::from(!(d2 <= b)) + u8::from(!(d2 <= c))
    } else {
        bands_sq.iter().position(|b| d2 <= *b).unwrap_or(3) as u8
    }
}

/// Order of candidates: nearer first, then lower id.
fn by_distance_then_id(a: &(f32, u32), b: &(f32, u32)) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

impl InterestIndex {
    /// Builds the index from `(entity id, position)` pairs.
    pub fn build(points: impl IntoIterator<Item = (u32, [f32; 3])>, bands_m: [f32; 3]) -> Self {
        let pts: Vec<Point> = points
            .into_iter()
            .map(|(id, pos)| Point { id, pos })
            .collect();
        let mut lo = [f32::INFINITY; 3];
        let mut hi = [f32::NEG_INFINITY; 3];
        for p in &pts {
            for k in 0..3 {
                lo[k] = lo[k].min(p.pos[k]);
                hi[k] = hi[k].max(p.pos[k]);
            }
        }
        let area = ((hi[0] - lo[0]).max(1.0) * (hi[2] - lo[2]).max(1.0)).max(1.0);
        let density = if area.is_finite() {
            pts.len() as f32 / area
        } else {
            0.0
        };
        Self {
            tree: RTree::bulk_load(pts),
            bands_sq: bands_m.map(|b| b * b),
            bounds: (lo, hi),
            density,
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
    #[inline]
    pub fn tier_of(&self, d2: f32) -> u8 {
        tier_in(&self.bands_sq, d2)
    }

    /// The `cap` nearest entities to `at`, excluding `viewer`, ties broken by id, written into
    /// `out` sorted by id.
    pub fn nearest(&self, viewer: u32, at: [f32; 3], cap: usize, out: &mut InterestSet) {
        out.entries.clear();
        let cand = &mut out.scratch;
        cand.clear();
        if cap == 0 || self.is_empty() {
            return;
        }
        let d2_of = |p: &Point| p.distance_2(&at);
        if self.len() <= cap + 1 || !at.iter().all(|x| x.is_finite()) {
            // Everyone else fits (or the viewer is nowhere): no search, exact by definition.
            cand.extend(
                self.tree
                    .iter()
                    .filter(|p| p.id != viewer)
                    .map(|p| (d2_of(p), p.id)),
            );
        } else {
            // The farthest any indexed point can be: once the radius covers it, all are in.
            let (lo, hi) = self.bounds;
            let far2: f32 = (0..3)
                .map(|k| {
                    let d = (at[k] - lo[k]).abs().max((hi[k] - at[k]).abs());
                    d * d
                })
                .sum();
            let want = cap as f32 * 1.5 + 1.0;
            let mut r2 = if self.density > 0.0 {
                want / (std::f32::consts::PI * self.density)
            } else {
                far2
            }
            .max(1.0);
            loop {
                cand.clear();
                // The square around the ball, then the ball: the same candidates as a distance
                // query, with cheaper box tests in the tree.
                let r = r2.sqrt();
                let square = AABB::from_corners(
                    [at[0] - r, at[1] - r, at[2] - r],
                    [at[0] + r, at[1] + r, at[2] + r],
                );
                cand.extend(
                    self.tree
                        .locate_in_envelope(square)
                        .filter(|p| p.id != viewer)
                        .map(|p| (d2_of(p), p.id))
                        .filter(|(d2, _)| *d2 <= r2),
                );
                // Every one of the `cap` nearest lies within the radius once `cap` others do
                // (ties at the cap-th distance included: they are within it too).
                if cand.len() >= cap || r2 >= far2 {
                    break;
                }
                r2 *= 2.25;
            }
        }
        if cand.len() > cap {
            cand.select_nth_unstable_by(cap - 1, by_distance_then_id);
            cand.truncate(cap);
        }
        out.entries
            .extend(cand.iter().map(|(d2, id)| (*id, self.tier_of(*d2))));
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

    /// Everyone sorted by (distance, id), the first `cap`, sorted by id: the definition.
    fn brute_force(pts: &[(u32, [f32; 3])], viewer: u32, at: [f32; 3], cap: usize) -> Vec<u32> {
        let mut all: Vec<(f32, u32)> = pts
            .iter()
            .filter(|(id, _)| *id != viewer)
            .map(|(id, p)| (Point { id: *id, pos: *p }.distance_2(&at), *id))
            .collect();
        all.sort_by(by_distance_then_id);
        all.truncate(cap);
        let mut ids: Vec<u32> = all.into_iter().map(|(_, id)| id).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn matches_the_definition_with_many_ties_and_clusters() {
        // Integer grid positions (many equal distances) plus a dense cluster and a far outlier.
        let mut state = 0x1234_5678_u64;
        let mut next = move |m: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % m
        };
        for n in [2usize, 5, 40, 300, 1000] {
            let mut pts: Vec<(u32, [f32; 3])> = (0..n as u32)
                .map(|i| {
                    let (x, z) = (next(41) as f32 - 20.0, next(41) as f32 - 20.0);
                    if i % 7 == 0 {
                        (i * 3 + 1, [x * 0.01, 0.0, z * 0.01])
                    } else {
                        (i * 3 + 1, [x, next(3) as f32, z])
                    }
                })
                .collect();
            pts.push((9_999, [500.0, 0.0, 500.0]));
            let idx = InterestIndex::build(pts.iter().copied(), DEFAULT_TIER_BANDS_M);
            let mut set = InterestSet::default();
            for cap in [1usize, 3, 32, 256] {
                for k in (0..pts.len()).step_by(7) {
                    let (viewer, at) = pts[k];
                    idx.nearest(viewer, at, cap, &mut set);
                    let got: Vec<u32> = set.entries.iter().map(|e| e.0).collect();
                    assert_eq!(
                        got,
                        brute_force(&pts, viewer, at, cap),
                        "n {n} cap {cap} k {k}"
                    );
                }
                // A viewer that is not indexed, far outside the crowd.
                idx.nearest(0, [-300.0, 0.0, 40.0], cap, &mut set);
                let got: Vec<u32> = set.entries.iter().map(|e| e.0).collect();
                assert_eq!(got, brute_force(&pts, 0, [-300.0, 0.0, 40.0], cap));
            }
        }
    }

    #[test]
    fn branch_free_tiers_match_the_first_band_that_holds_the_distance() {
        let first = |b: &[f32; 3], d2: f32| b.iter().position(|x| d2 <= *x).unwrap_or(3) as u8;
        for bands in [
            [1.0, 4.0, 9.0],
            [1.0, 1.0, 9.0],
            [9.0, 4.0, 1.0],
            [0.0, 0.0, 0.0],
        ] {
            for d2 in [
                0.0,
                0.5,
                1.0,
                2.0,
                4.0,
                8.0,
                9.0,
                10.0,
                f32::INFINITY,
                f32::NAN,
            ] {
                assert_eq!(tier_in(&bands, d2), first(&bands, d2), "{bands:?} {d2}");
            }
        }
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
