//! The turmoil simulation harness of `tests/directory/turmoil_sweep.rs` (D1 in docs/TESTING.md).

pub(crate) mod check;
pub(crate) mod node;
pub(crate) mod wire;
