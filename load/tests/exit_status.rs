//! `plaza-load`'s exit status as CI scripts rely on it: against a server that refuses every
//! WebSocket upgrade (HTTP 403, as a gateway at its connection cap or behind a wrong route
//! does) every bot fails, the run exits 2, and the Markdown summary opens with the verdict.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

const LOAD: &str = env!("CARGO_BIN_EXE_plaza-load");

/// Answers every connection with `403 Forbidden` until the process ends.
fn refusing_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let mut buf = [0u8; 2048];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    port
}

#[test]
fn every_bot_refused_exits_2_with_a_failing_verdict() {
    let port = refusing_server();
    let dir = std::env::temp_dir().join(format!("plaza-load-refused-{}", std::process::id()));
    let report = dir.join("r.json");
    let out = Command::new(LOAD)
        .args(["--gateway", &format!("ws://127.0.0.1:{port}/v1/ws")])
        .args([
            "--bots",
            "3",
            "--duration",
            "2s",
            "--ramp",
            "100ms",
            "--quiet",
        ])
        .args(["--threads", "1", "--report"])
        .arg(&report)
        .output()
        .expect("plaza-load runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(2),
        "exit status; stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("Verdict: FAIL"), "{stdout}");
    let md = std::fs::read_to_string(dir.join("r.md")).expect("markdown summary");
    assert!(
        md.starts_with("**Verdict: FAIL**: 3 of 3 bots failed or lost"),
        "{md}"
    );
}

#[test]
fn an_unmeasured_threshold_is_named_in_the_verdict() {
    // Every bot refused: the bots rule decides the status (2); a threshold that could not be
    // measured (no --metrics-url) is a failed check, named in the verdict line.
    let port = refusing_server();
    let out = Command::new(LOAD)
        .args(["--gateway", &format!("ws://127.0.0.1:{port}/v1/ws")])
        .args(["--bots", "1", "--duration", "1s", "--quiet"])
        .args(["--max-tick-p99-ms", "5"])
        .output()
        .expect("plaza-load runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("server tick p99 not measured (limit 5 ms)"),
        "{stdout}"
    );
}
