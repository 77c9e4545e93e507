//! Lab life cycle: run-time changes, link down/up, clean-up after a panic,
//! after `kill -9` of the emulator and after repeated `down`, the CLI.
//! Needs root; skipped (with a message) otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use haul_lab::{Dir, Lab};

fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

fn flow(lab: &Lab, n: u32) -> usize {
    udp_flow(
        lab,
        1,
        2,
        n,
        Duration::from_micros(500),
        100,
        false,
        Duration::from_millis(200),
    )
    .len()
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn set_and_link_down_up_at_run_time() {
    root("set_and_link_down_up_at_run_time");
    let _g = serial();
    let lab = Lab::builder().hosts(3).link("delay 1ms").start().unwrap();
    assert_eq!(flow(&lab, 200), 200);
    lab.link_down(2).unwrap();
    assert_eq!(flow(&lab, 200), 0);
    let st = lab.stats().unwrap();
    assert!(!st.hosts[1].up);
    assert_eq!(st.hosts[1].ingress.down_drops, 200);
    lab.link_up(2).unwrap();
    assert_eq!(flow(&lab, 200), 200);
    lab.set_profile(2, Dir::Ingress, "loss 100%").unwrap();
    assert_eq!(flow(&lab, 100), 0);
    lab.set_profile(2, Dir::Ingress, "clean").unwrap();
    assert_eq!(flow(&lab, 100), 100);
    assert!(lab.set_profile(2, Dir::Both, "loss lots").is_err());
    assert!(lab.set_profile(9, Dir::Both, "loss 1%").is_err());
    let st = lab.down().unwrap();
    assert_eq!(st.hosts[0].egress.packets, 800);
    let json = serde_json::to_string(&st).unwrap();
    assert!(json.contains("\"queue_drops\""));
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn labs_side_by_side_do_not_collide() {
    root("labs_side_by_side_do_not_collide");
    let _g = serial();
    let a = Lab::builder().hosts(2).start().unwrap();
    let b = Lab::builder().hosts(2).link("loss 100%").start().unwrap();
    assert_ne!(a.name(), b.name());
    assert_eq!(a.host(1).addr(), b.host(1).addr());
    assert_eq!(flow(&a, 100), 100);
    assert_eq!(flow(&b, 100), 0);
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn a_panicking_test_leaves_nothing_behind() {
    root("a_panicking_test_leaves_nothing_behind");
    let _g = serial();
    let names = std::thread::spawn(|| {
        let lab = Lab::builder().hosts(2).start().unwrap();
        let names: Vec<String> = lab.hosts().iter().map(|h| h.netns().to_string()).collect();
        assert!(names.iter().all(|n| netns_exists(n)));
        std::panic::panic_any(names)
    })
    .join()
    .unwrap_err();
    let names = names.downcast::<Vec<String>>().unwrap();
    for n in names.iter() {
        assert!(!netns_exists(n), "{n} leaked");
    }
    let lab_name = names[0]
        .trim_start_matches("hl-")
        .rsplit_once("-h")
        .unwrap()
        .0
        .to_string();
    assert!(!Path::new("/run/haul-lab").join(lab_name).exists());
}

fn dev(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_haul-lab-dev"))
        .arg("lab")
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = dev(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Runs `down` for a CLI lab even when the test fails half-way.
struct DownOnDrop(String);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        let _ = dev(&["down", "--name", &self.0]);
    }
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn cli_up_exec_set_link_stats_down() {
    root("cli_up_exec_set_link_stats_down");
    let _g = serial();
    let name = format!("cli{}", std::process::id());
    let n = ["--name", name.as_str()];
    let _guard = DownOnDrop(name.clone());
    // A leftover namespace of a dead lab is swept by the next `up`.
    Command::new("ip")
        .args(["netns", "add", "hl-deadlab-h1"])
        .status()
        .unwrap();
    let out = ok(&["up", n[0], n[1], "--hosts", "3", "--link", "delay 5ms"]);
    assert!(out.contains("198.18.0.3"), "{out}");
    assert!(!netns_exists("hl-deadlab-h1"));
    assert!(
        !dev(&["up", n[0], n[1]]).status.success(),
        "second up must refuse"
    );
    let ping = dev(&[
        "exec",
        n[0],
        n[1],
        "h1",
        "--",
        "sh",
        "-c",
        "echo $HAUL_LAB_HOST; ip -o -4 addr show eth0",
    ]);
    let text = String::from_utf8_lossy(&ping.stdout);
    assert!(
        text.contains("h1") && text.contains("198.18.0.1/24"),
        "{text}"
    );
    // exec passes the exit status through.
    assert_eq!(
        dev(&["exec", n[0], n[1], "h2", "--", "sh", "-c", "exit 3"])
            .status
            .code(),
        Some(3)
    );
    ok(&["set", n[0], n[1], "h2", "--dir", "egress", "loss", "10%"]);
    assert!(!dev(&["set", n[0], n[1], "h2", "loss much"])
        .status
        .success());
    ok(&["link", n[0], n[1], "3", "down"]);
    let json = ok(&["stats", n[0], n[1], "--json"]);
    let st: haul_lab::LabStats = serde_json::from_str(&json).unwrap();
    // `set` replaces the whole profile of that direction, as `tc qdisc change`.
    assert_eq!(st.hosts[1].egress_profile, "loss 10%");
    assert!(!st.hosts[2].up);
    let table = ok(&["stats", n[0], n[1]]);
    assert!(table.contains("DOWN"));
    let down = ok(&["down", n[0], n[1]]);
    assert!(
        down.contains("egress"),
        "down prints the final counters: {down}"
    );
    for i in 1..=3 {
        assert!(!netns_exists(&format!("hl-{name}-h{i}")));
    }
    // A second down is harmless.
    ok(&["down", n[0], n[1]]);
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn killing_the_emulator_cleans_up() {
    root("killing_the_emulator_cleans_up");
    let _g = serial();
    let name = format!("kill{}", std::process::id());
    let _guard = DownOnDrop(name.clone());
    ok(&["up", "--name", &name, "--hosts", "2"]);
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("/run/haul-lab/{name}/state.json")).unwrap(),
    )
    .unwrap();
    let pid = state["pid"].as_i64().unwrap() as i32;
    // SAFETY: sending a signal to the lab's own emulator process.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let gone = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(25));
        !netns_exists(&format!("hl-{name}-h1")) && !Path::new("/run/haul-lab").join(&name).exists()
    });
    assert!(gone, "namespaces or state left after kill -9");
    assert!(!dev(&["stats", "--name", &name]).status.success());
    ok(&["down", "--name", &name]);
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn sigterm_stops_the_emulator_cleanly() {
    root("sigterm_stops_the_emulator_cleanly");
    let _g = serial();
    let name = format!("term{}", std::process::id());
    let _guard = DownOnDrop(name.clone());
    ok(&["up", "--name", &name, "--hosts", "2"]);
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("/run/haul-lab/{name}/state.json")).unwrap(),
    )
    .unwrap();
    let pid = state["pid"].as_i64().unwrap() as i32;
    // SAFETY: sending a signal to the lab's own emulator process.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let gone = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(25));
        !netns_exists(&format!("hl-{name}-h2")) && !Path::new("/run/haul-lab").join(&name).exists()
    });
    assert!(gone);
}
