//! A live `plaza up`'s `/metrics` as Prometheus tooling reads it: classic text for `curl`-style
//! requests that lints clean with `promtool check metrics` (Debian package `prometheus`, which
//! `.ci/run` installs), OpenMetrics when the `Accept` header prefers it, with the process
//! metrics, `plaza_build_info` and the directory latency histograms present.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PLAZA: &str = env!("CARGO_BIN_EXE_plaza");

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Kills the child when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` with the given Accept header; (head, body).
fn get(port: u16, path: &str, accept: Option<&str>) -> std::io::Result<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{accept}Connection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Ok((head.to_owned(), body.to_owned()))
}

fn start() -> (Running, u16) {
    let admin = free_port();
    let child = Command::new(PLAZA)
        .arg("up")
        .env("PLAZA__GATEWAY__LISTEN", "127.0.0.1:0")
        .env("PLAZA__ADMIN__LISTEN", format!("127.0.0.1:{admin}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("plaza starts");
    let running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok((head, _)) = get(admin, "/readyz", None)
            && head.contains(" 200 ")
        {
            return (running, admin);
        }
        assert!(Instant::now() < deadline, "plaza up never became ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn live_metrics_lint_clean_with_promtool_in_classic_text() {
    let (_plaza, admin) = start();
    // curl's Accept.
    let (head, body) = get(admin, "/metrics", Some("*/*")).unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    for name in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_max_fds ",
        "process_threads ",
        "process_start_time_seconds ",
        "plaza_build_info{",
        "plaza_directory_operation_duration_seconds_bucket{",
    ] {
        assert!(body.contains(name), "{name} missing from\n{body}");
    }
    assert!(!body.contains("# EOF"), "classic text has no EOF marker");

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed (Debian package `prometheus`; .ci/run installs it)");
    promtool
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(body.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool check metrics: {report}"
    );
}

#[test]
fn prometheus_scrape_header_gets_openmetrics() {
    let (_plaza, admin) = start();
    let accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                  version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (head, body) = get(admin, "/metrics", Some(accept)).unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(
        body.trim_end().ends_with("# EOF"),
        "OpenMetrics ends with EOF"
    );
    assert!(body.contains("# TYPE process_cpu_seconds counter"));
}
