//! [`EventLog`]: the optional log of room activations and directory commits that cluster tests
//! check for single activation.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use plaza_directory::Epoch;

use crate::room;

/// An append-only text log of room activations and directory commits, one line per event,
/// for checking single activation across processes after a run. Disabled unless a path is
/// given (`plaza node --event-log PATH`). Lines (times are Unix milliseconds):
///
/// ```text
/// activate ROOM ERA.COUNTER NODE AT_MS
/// commit ROOM ERA.COUNTER SENT_MS DONE_MS WHAT
/// release ROOM ERA.COUNTER NODE AT_MS
/// handoff ROOM ERA.COUNTER put|taken MEMBERS AT_MS
/// ```
///
/// A `commit` is a directory write of the room that the directory accepted; it took effect at
/// some instant in `[SENT_MS, DONE_MS]`. Writes are small synchronous appends (a diagnostic,
/// not a hot path: a few lines per room per second).
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    file: Option<Arc<std::sync::Mutex<std::fs::File>>>,
}

impl EventLog {
    /// A log that records nothing.
    pub fn disabled() -> Self {
        Self { file: None }
    }

    /// Appends to `path` (created if missing).
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            file: Some(Arc::new(std::sync::Mutex::new(f))),
        })
    }

    /// A room activation under `epoch` on `node`.
    pub fn activate(&self, room: &str, epoch: Epoch, node: &str) {
        self.line(format_args!("activate {room} {epoch} {node} {}", now_ms()));
    }

    /// An accepted directory write of `room` under `epoch`.
    pub fn commit(&self, room: &str, epoch: Epoch, sent_ms: u64, done_ms: u64, what: &str) {
        self.line(format_args!(
            "commit {room} {epoch} {sent_ms} {done_ms} {what}"
        ));
    }

    /// The lease of `epoch` was given up.
    pub fn release(&self, room: &str, epoch: Epoch, node: &str) {
        self.line(format_args!("release {room} {epoch} {node} {}", now_ms()));
    }

    /// A handoff state was stored (`put`) or taken over (`taken`).
    pub fn handoff(&self, room: &str, epoch: Epoch, what: &str, members: usize) {
        self.line(format_args!(
            "handoff {room} {epoch} {what} {members} {}",
            now_ms()
        ));
    }

    fn line(&self, args: std::fmt::Arguments<'_>) {
        let Some(f) = &self.file else { return };
        let text = format!("{args}\n");
        let mut g = f.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = g.write_all(text.as_bytes()) {
            tracing::warn!(error = %e, "event log write failed");
        }
    }
}

fn now_ms() -> u64 {
    room::unix_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disabled_log_records_nothing_and_an_open_one_appends_lines() {
        EventLog::disabled().activate("r", Epoch::default(), "n");
        let path = std::env::temp_dir().join(format!(
            "plaza-event-log-{}-{:?}.txt",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_file(&path);
        let log = EventLog::open(&path).expect("open");
        let epoch = Epoch::new(3, 7);
        log.activate("r", epoch, "n");
        log.commit("r", epoch, 1, 2, "register");
        log.handoff("r", epoch, "put", 3);
        log.release("r", epoch, "n");
        // A second handle appends to the same file.
        EventLog::open(&path)
            .expect("reopen")
            .commit("r", epoch, 5, 6, "renew");
        let text = std::fs::read_to_string(&path).expect("read");
        let _ = std::fs::remove_file(&path);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(lines[0].starts_with(&format!("activate r {epoch} n ")));
        assert_eq!(lines[1], format!("commit r {epoch} 1 2 register"));
        assert!(lines[2].starts_with(&format!("handoff r {epoch} put 3 ")));
        assert!(lines[3].starts_with(&format!("release r {epoch} n ")));
        assert_eq!(lines[4], format!("commit r {epoch} 5 6 renew"));
    }
}
