//! The shared suite against [`MemoryDirectory`] on a manual clock.

use crate::{all_suite_tests, suite};

use std::sync::Arc;

use plaza_directory::{Directory, ManualClock, MemoryDirectory, SharedDirectory};

struct MemEnv {
    clock: Arc<ManualClock>,
    dir: Arc<MemoryDirectory>,
}

#[async_trait::async_trait]
impl suite::Env for MemEnv {
    fn dir(&self) -> &dyn Directory {
        &*self.dir
    }
    fn shared(&self) -> SharedDirectory {
        self.dir.clone()
    }
    async fn elapse(&self, ms: u64) {
        self.clock.advance(ms);
    }
    fn short_ttl(&self) -> u64 {
        1_000
    }
}

async fn make() -> MemEnv {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let dir = Arc::new(MemoryDirectory::with_clock(clock.clone()));
    MemEnv { clock, dir }
}

all_suite_tests!(make);
