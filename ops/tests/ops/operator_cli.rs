//! The `plaza` binary's operator-facing behaviour: JSON logs, the log filter checked at start,
//! `plaza config check`, secrets redacted by `plaza config print`, errors printed once with
//! their source, host names as addresses.

use std::io::Read as _;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PLAZA: &str = env!("CARGO_BIN_EXE_plaza");

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn plaza(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(PLAZA);
    cmd.args(args).env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("plaza runs")
}

#[test]
fn json_log_format_writes_json_lines_only() {
    let port = free_port();
    let mut child = Command::new(PLAZA)
        .arg("up")
        .env("PLAZA__LOG__FORMAT", "json")
        .env("PLAZA__LOG__LEVEL", "info")
        .env("PLAZA__GATEWAY__LISTEN", format!("localhost:{port}"))
        .env("PLAZA__ADMIN__LISTEN", format!("127.0.0.1:{}", free_port()))
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("plaza starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "plaza up (on localhost:{port}) never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert!(child.wait().unwrap().success());
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 3, "start and stop are logged: {stderr}");
    for line in lines
        .iter()
        .chain(stdout.lines().collect::<Vec<_>>().iter())
    {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        for key in ["timestamp", "level", "target"] {
            assert!(v.get(key).is_some(), "{key} missing in {line}");
        }
        assert!(
            !line.contains('\u{1b}'),
            "no ANSI colour when not a terminal: {line}"
        );
    }
}

#[test]
fn a_misspelt_log_level_stops_start_up_naming_the_directive_once() {
    for (var, value) in [
        ("PLAZA__LOG__LEVEL", "debugg"),
        ("PLAZA__LOG__LEVEL", "[[["),
        ("RUST_LOG", "infoo"),
    ] {
        let out = plaza(
            &["up"],
            &[
                (var, value),
                ("RUST_BACKTRACE", "1"),
                ("PLAZA__ADMIN__LISTEN", "127.0.0.1:0"),
                ("PLAZA__GATEWAY__LISTEN", "127.0.0.1:0"),
            ],
        );
        assert!(!out.status.success(), "{var}={value} must not start");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("`{value}`")),
            "names the directive: {err}"
        );
        assert_eq!(
            err.trim().lines().count(),
            1,
            "printed once, no backtrace: {err}"
        );
        assert!(
            err.contains(if var == "RUST_LOG" {
                "RUST_LOG"
            } else {
                "log.level"
            }),
            "{err}"
        );
    }
}

#[test]
fn config_check_validates_without_starting() {
    let out = plaza(&["config", "check"], &[("PLAZA__ROOM__TICK_HZ", "60")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("configuration ok") && text.contains("room.tick_hz (env)"),
        "{text}"
    );
    // A rule between keys, named with its environment variable, once, without a backtrace.
    let out = plaza(
        &["config", "check"],
        &[
            ("PLAZA__ROOM__BROADCAST_HZ", "100"),
            ("RUST_BACKTRACE", "1"),
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("room.broadcast_hz")
            && err.contains("PLAZA__ROOM__BROADCAST_HZ")
            && err.trim().lines().count() == 1,
        "{err}"
    );
    // A typo in a variable name is refused naming the variable.
    let out = plaza(
        &["config", "check"],
        &[("PLAZA__GATEWAY__LISTEN_PORT", "1")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("environment variable PLAZA__GATEWAY__LISTEN_PORT"),
        "{err}"
    );
    // URLs, OTEL variables and the log filter are checked too.
    for (k, v) in [
        ("PLAZA__DIRECTORY__REDIS_URL", "http://redis:6379"),
        ("OTEL_TRACES_SAMPLER", "sometimes"),
        ("PLAZA__LOG__LEVEL", "warning"),
        ("PLAZA__TELEMETRY__OTLP_ENDPOINT", "collector:4317"),
    ] {
        let out = plaza(&["config", "check"], &[(k, v)]);
        assert!(!out.status.success(), "{k}={v} accepted");
    }
}

#[test]
fn config_print_redacts_secrets() {
    let out = plaza(
        &["config", "print"],
        &[
            (
                "PLAZA__DIRECTORY__REDIS_URL",
                "redis://:s3cret@redis.example:6379/0",
            ),
            ("PLAZA__ADMIN__TOKEN", "tok3n"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains("s3cret") && !text.contains("tok3n"),
        "{text}"
    );
    assert!(
        text.contains("directory.redis_url = \"redis://:***@redis.example:6379/0\"  # env"),
        "{text}"
    );
    assert!(
        text.contains("admin.token = \"<redacted>\"  # env"),
        "{text}"
    );
}
