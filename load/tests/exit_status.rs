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

/// Serves a Prometheus text page whose `process_cpu_seconds_total` grows by 0.5 s per scrape
/// (half a core at one scrape a second) and whose RSS is 64 MiB.
fn metrics_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut cpu = 10.0f64;
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let mut buf = [0u8; 2048];
            let _ = s.read(&mut buf);
            cpu += 0.5;
            let body = format!(
                "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {cpu}\n\
                 # TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 67108864\n"
            );
            let _ = s.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
    port
}

#[test]
fn a_refused_run_still_reports_rooms_and_the_server_process() {
    // Every bot is refused (exit 2), yet the report says which rooms they were meant for and
    // what the server process used meanwhile (from its /metrics).
    let port = refusing_server();
    let metrics = metrics_server();
    let dir = std::env::temp_dir().join(format!("plaza-load-rooms-{}", std::process::id()));
    let report = dir.join("r.json");
    let url = format!("http://127.0.0.1:{metrics}/metrics");
    let out = Command::new(LOAD)
        .args(["--gateway", &format!("ws://127.0.0.1:{port}/v1/ws")])
        .args(["--bots", "4", "--rooms", "2", "--duration", "3s"])
        .args(["--ramp", "100ms", "--quiet", "--threads", "1"])
        .args(["--server-metrics", &url, "--report"])
        .arg(&report)
        .output()
        .expect("plaza-load runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(dir.join("r.md")).expect("markdown summary");
    assert!(md.starts_with("**Verdict: FAIL**"), "{md}");
    assert!(md.contains("\n## Rooms\n"), "{md}");
    assert!(md.contains("| load-0 | 2 | 0 / 2 / 0 |"), "{md}");
    assert!(md.contains("| load-1 | 2 | 0 / 2 / 0 |"), "{md}");
    assert!(md.contains("\n## Server processes\n"), "{md}");
    assert!(md.contains(&format!("| {url} | 0.")), "{md}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("json report")).unwrap();
    let rooms = json["per_room"].as_array().expect("per_room");
    assert_eq!(rooms.len(), 2, "{rooms:?}");
    assert_eq!(rooms[0]["room"], "load-0");
    assert_eq!(rooms[0]["failed"], 2);
    let server = &json["servers"][0];
    assert_eq!(server["url"], url.as_str());
    assert!(server["samples"].as_u64().unwrap() >= 2, "{server}");
    let cores = server["cpu_cores_avg"].as_f64().unwrap();
    // 0.5 CPU s per scrape at about one scrape a second.
    assert!((0.2..=1.0).contains(&cores), "{server}");
    assert!(
        (server["rss_peak_mib"].as_f64().unwrap() - 64.0).abs() < 0.01,
        "{server}"
    );
    assert_eq!(json["server"]["cpu_cores_avg"], server["cpu_cores_avg"]);
    let _ = std::fs::remove_dir_all(&dir);
}
