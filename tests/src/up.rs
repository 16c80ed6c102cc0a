//! `plaza up` as a child process, the way a user runs it: on free loopback ports, with a clean
//! environment plus what the test sets, its output in a log file; killed when dropped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::cluster::{free_port, plaza_bin, wait_until};
use crate::http_get;

/// A running `plaza up`.
pub struct PlazaUp {
    child: Child,
    /// The WebSocket listener.
    pub ws: SocketAddr,
    /// The admin listener.
    pub admin: SocketAddr,
    log: PathBuf,
}

impl PlazaUp {
    /// Starts `plaza up` with none of the caller's `OTEL_*`, `PLAZA__*`, `SSL_CERT_*` or
    /// `RUST_LOG` variables, plus `env`; stdout and stderr go to `log`. Does not wait for it
    /// ([`Self::wait_ready`]).
    pub fn start(log: PathBuf, env: &[(&str, String)]) -> Self {
        let ws: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let out = std::fs::File::create(&log).expect("create the log file");
        let mut cmd = Command::new(plaza_bin().expect("the plaza binary"));
        cmd.args(["up", "--listen", &ws.to_string()])
            .args(["--admin-listen", &admin.to_string()]);
        for (k, _) in std::env::vars() {
            if k.starts_with("OTEL_")
                || k.starts_with("PLAZA__")
                || k.starts_with("SSL_CERT_")
                || k == "RUST_LOG"
            {
                cmd.env_remove(k);
            }
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file handle"))
            .stderr(out)
            .spawn()
            .expect("plaza up starts");
        Self {
            child,
            ws,
            admin,
            log,
        }
    }

    /// Waits (bounded: 30 s) until `/readyz` answers 200; panics with the log otherwise.
    pub async fn wait_ready(&self) {
        let ready = wait_until(Duration::from_secs(30), || async {
            matches!(http_get(self.admin, "/readyz").await, Ok((200, _)))
        })
        .await;
        assert!(ready.is_some(), "plaza up never ready:\n{}", self.log());
    }

    /// The WebSocket URL clients connect to.
    pub fn url(&self) -> String {
        format!("ws://{}/v1/ws", self.ws)
    }

    /// Everything the process wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        let t = self.log();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for PlazaUp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
