//! Running under systemd: the units in `packaging/systemd` pass
//! `systemd-analyze verify` without a word, and `haul serve` and `haul
//! daemon` tell systemd when they are ready, keep its watchdog fed and say
//! when they stop (`Type=notify`; a datagram socket of the test's own
//! stands in for systemd's).

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::harness::*;

#[test]
fn the_systemd_units_verify_clean() {
    let s = Scratch::new();
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/systemd");
    let mut checked = Vec::new();
    for (unit, as_name) in [
        ("haul-serve@.service", "haul-serve@archive.service"),
        ("haul-daemon.service", "haul-daemon.service"),
    ] {
        let text = std::fs::read_to_string(units.join(unit)).unwrap();
        assert!(text.contains("Type=notify") && text.contains("ProtectSystem=strict"));
        // verify wants the binary the unit runs to exist: this build's.
        let at = s.path(as_name);
        std::fs::write(&at, text.replace("/usr/bin/haul", BIN)).unwrap();
        checked.push(at);
    }
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(&checked)
        .output()
        .expect("systemd-analyze (scripts/test.sh installs systemd)");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

/// Waits up to 30 s for the next datagram on `sock`.
fn next(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let n = sock.recv(&mut buf).expect("a notification within 30 s");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn terminate(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
}

#[test]
fn serve_and_daemon_tell_systemd_ready_watchdog_and_stopping() {
    let s = Scratch::new();
    let socket = s.path("notify");
    let sock = UnixDatagram::bind(&socket).unwrap();
    std::fs::create_dir_all(s.path("root")).unwrap();
    let mut serve = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--plaintext",
            "--open",
            "--root",
        ])
        .arg(s.path("root"))
        .env("HAUL_CONFIG_DIR", s.path("config"))
        .env("NOTIFY_SOCKET", &socket)
        .env("WATCHDOG_USEC", "200000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ready = next(&sock);
    assert!(ready.starts_with("READY=1\nSTATUS=serving "), "{ready:?}");
    assert_eq!(next(&sock), "WATCHDOG=1");
    terminate(&mut serve);
    let mut said = next(&sock);
    while said == "WATCHDOG=1" {
        said = next(&sock);
    }
    assert_eq!(said, "STOPPING=1");
    assert!(serve.wait().unwrap().success());

    // The daemon: ready once its sources run, stopping on SIGTERM.
    std::fs::write(
        s.path("haul.toml"),
        format!(
            "catalog = \"sqlite:{}\"\nstatus = \"off\"\n\n[[source]]\nname = \"idle\"\nurl = \"http://127.0.0.1:9/\"\ndest = \"{}\"\nschedule = \"every 1h\"\n",
            s.path("catalog.db").display(),
            s.path("dest").display()
        ),
    )
    .unwrap();
    let mut daemon = Command::new(BIN)
        .args(["daemon", "--config"])
        .arg(s.path("haul.toml"))
        .env("HAUL_CONFIG_DIR", s.path("config"))
        .env("NOTIFY_SOCKET", &socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ready = next(&sock);
    assert!(ready.starts_with("READY=1"), "{ready:?}");
    terminate(&mut daemon);
    assert_eq!(next(&sock), "STOPPING=1");
    assert!(daemon.wait().unwrap().success());
}
