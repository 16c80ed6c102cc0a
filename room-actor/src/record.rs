//! Test mode: the room's authoritative poses per step, as JSON lines (issue 13's felt-quality
//! harness compares what clients render with them).
//!
//! Off unless the environment variable `PLAZA_RECORD_POSES` names a file when the room starts
//! (not a configuration key: it is a measurement hook, never used in production). Each step
//! appends one line per member whose pose changed since the previous step (and every member on
//! the first step):
//! `{"room":"plaza","tick":1234,"now_ms":24680,"entity":3,"p":[x,y,z],"v":[x,y,z],"flags":1}`.
//! Between two lines of an entity its pose did not change. Lines of several rooms (and several
//! activations) may share the file; each write is one `write` of whole lines.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write as _;

use plaza_proto::quant::Pose;

/// The environment variable that turns recording on.
pub const RECORD_POSES_ENV: &str = "PLAZA_RECORD_POSES";

/// Appends authoritative poses to a file.
#[derive(Debug)]
pub struct PoseRecorder {
    file: File,
    last: HashMap<u32, ([f32; 3], [f32; 3], u16)>,
    buf: String,
}

impl PoseRecorder {
    /// The recorder the environment asks for, if any.
    pub fn from_env() -> Option<Self> {
        let path = std::env::var_os(RECORD_POSES_ENV)?;
        if path.is_empty() {
            return None;
        }
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            Ok(file) => Some(Self {
                file,
                last: HashMap::new(),
                buf: String::new(),
            }),
            Err(e) => {
                tracing::warn!(path = ?path, error = %e, "cannot record poses");
                None
            }
        }
    }

    /// One step's poses.
    pub fn step(
        &mut self,
        room: &str,
        tick: u64,
        now_ms: u64,
        poses: impl Iterator<Item = (u32, Pose)>,
    ) {
        use std::fmt::Write as _;
        for (entity, p) in poses {
            let key = (p.position, p.velocity, p.anim_flags);
            if self.last.get(&entity) == Some(&key) {
                continue;
            }
            self.last.insert(entity, key);
            let [x, y, z] = p.position;
            let [vx, vy, vz] = p.velocity;
            let _ = writeln!(
                self.buf,
                r#"{{"room":"{room}","tick":{tick},"now_ms":{now_ms},"entity":{entity},"p":[{x},{y},{z}],"v":[{vx},{vy},{vz}],"flags":{}}}"#,
                p.anim_flags
            );
        }
        if self.buf.len() > 16 * 1024 {
            self.flush();
        }
    }

    /// One step of `room`: the poses of `sessions`' avatars.
    pub fn room_step(
        &mut self,
        room_id: &str,
        room: &plaza_room_core::Room,
        now_ms: u64,
        sessions: &mut dyn Iterator<Item = plaza_room_core::SessionId>,
    ) {
        let poses = sessions.filter_map(|s| Some((room.entity_of(s)?, room.pose_of(s)?)));
        self.step(room_id, room.tick(), now_ms, poses);
    }

    /// Writes what is buffered.
    pub fn flush(&mut self) {
        if !self.buf.is_empty() {
            let _ = self.file.write_all(self.buf.as_bytes());
            self.buf.clear();
        }
    }
}
