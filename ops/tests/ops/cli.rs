//! The `plaza` binary as an operator runs it: environment overrides, unknown keys refused by
//! name, `plaza config print` with provenance, clean shutdown on SIGTERM.

use std::io::{BufRead as _, BufReader};
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

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("plaza-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join("plaza.toml");
    std::fs::write(&p, text).expect("write config");
    p
}

#[test]
fn env_override_moves_the_listener_and_shutdown_is_clean() {
    let port = free_port();
    let admin = free_port();
    let mut child = Command::new(PLAZA)
        .arg("up")
        .env("PLAZA__GATEWAY__LISTEN", format!("127.0.0.1:{port}"))
        .env("PLAZA__ADMIN__LISTEN", format!("127.0.0.1:{admin}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("plaza starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut listening = false;
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            listening = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        listening,
        "plaza up listens on the port PLAZA__GATEWAY__LISTEN names"
    );
    // SIGTERM: clean shutdown, exit 0.
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "plaza did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "clean exit, got {status}");
}

#[test]
fn an_unknown_key_stops_start_up_naming_the_key() {
    let path = temp_file(
        "unknown",
        "[gateway]\nlisten = \"127.0.0.1:0\"\nlisen_backlog = 5\n",
    );
    let out = Command::new(PLAZA)
        .args(["up", "--config"])
        .arg(&path)
        .output()
        .expect("plaza runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lisen_backlog"), "stderr names the key: {err}");
    // `config print` refuses it the same way.
    let out = Command::new(PLAZA)
        .args(["config", "print", "--config"])
        .arg(&path)
        .output()
        .expect("plaza runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("lisen_backlog"));
}

#[test]
fn config_print_shows_values_and_their_sources() {
    let path = temp_file("print", "[room]\nmax_members = 77\n");
    let out = Command::new(PLAZA)
        .args(["config", "print", "--config"])
        .arg(&path)
        .env("PLAZA__GATEWAY__LISTEN", "127.0.0.1:7788")
        .output()
        .expect("plaza runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |key: &str| {
        BufReader::new(text.as_bytes())
            .lines()
            .map_while(Result::ok)
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no line for {key} in\n{text}"))
    };
    assert_eq!(
        line("gateway.listen"),
        "gateway.listen = \"127.0.0.1:7788\"  # env"
    );
    assert_eq!(line("room.max_members"), "room.max_members = 77  # file");
    assert_eq!(line("room.tick_hz"), "room.tick_hz = 50  # default");
}
