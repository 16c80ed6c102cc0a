//! The synchronisation primitives of the directory's shared state, swappable for loom's.
//!
//! Normally `parking_lot::Mutex` and std atomics; under `RUSTFLAGS="--cfg loom"`
//! (`scripts/loom.sh`) loom's, so `tests/loom.rs` can explore every interleaving of the
//! memory backend's lock-protected tables, the [`crate::ManualClock`] and the Redis
//! backend's [`crate::era::EraFloor`]. Under loom these types only work inside `loom::model`.

#[cfg(not(loom))]
pub(crate) use parking_lot::Mutex;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicU64;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU64;

/// loom's mutex with parking_lot's infallible `lock()`.
#[cfg(loom)]
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(v: T) -> Self {
        Self(loom::sync::Mutex::new(v))
    }

    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0
            .lock()
            .expect("a loom model thread panicked holding the lock")
    }
}
