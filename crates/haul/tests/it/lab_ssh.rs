//! haul over ssh through the lab (root only): a real OpenSSH `sshd` in
//! each host's namespace, the client in h1 reaching them across the lab's
//! links — a fan-out over ssh with a node killed at half and a host whose
//! sshd is down, and a push over QUIC at 10 % loss.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use haul_lab::{Host, Lab};

use crate::harness::{b3, listing, run, said, staged, stderr, write_file, Scratch, BIN};

const LIMIT: Duration = Duration::from_secs(240);

/// Keys and known_hosts shared by every lab sshd, and the `-e` that uses them.
struct Keys {
    dir: PathBuf,
}

impl Keys {
    fn make(dir: &Path, hosts: &[&Host]) -> Keys {
        std::fs::create_dir_all(dir).unwrap();
        for name in ["host", "client"] {
            let st = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", ""])
                .arg("-f")
                .arg(dir.join(name))
                .status()
                .expect("ssh-keygen");
            assert!(st.success());
        }
        std::fs::copy(dir.join("client.pub"), dir.join("authorized_keys")).unwrap();
        let host_key = std::fs::read_to_string(dir.join("host.pub")).unwrap();
        let key: Vec<&str> = host_key.split_whitespace().take(2).collect();
        let lines: String = hosts
            .iter()
            .map(|h| format!("{} {}\n", h.addr(), key.join(" ")))
            .collect();
        std::fs::write(dir.join("known_hosts"), lines).unwrap();
        Keys {
            dir: dir.to_path_buf(),
        }
    }

    fn rsh(&self) -> String {
        format!(
            "ssh -i {} -o IdentitiesOnly=yes -o UserKnownHostsFile={} -o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=5",
            self.dir.join("client").display(),
            self.dir.join("known_hosts").display()
        )
    }
}

/// An sshd in a lab host's namespace on port 22; killed on drop.
struct Sshd(Child);

impl Sshd {
    fn start(host: &Host, keys: &Keys) -> Sshd {
        std::fs::create_dir_all("/run/sshd").unwrap();
        let d = &keys.dir;
        let conf = d.join(format!("sshd_{}", host.name()));
        std::fs::write(
            &conf,
            format!(
                "ListenAddress {addr}\nPort 22\nHostKey {d}/host\nPidFile {d}/sshd_{n}.pid\n\
                 AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\n\
                 PermitRootLogin yes\nPasswordAuthentication no\nUseDNS no\nMaxStartups 100\n\
                 SetEnv SHLVL=1\n",
                addr = host.addr(),
                d = d.display(),
                n = host.name()
            ),
        )
        .unwrap();
        let child = host
            .command("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sshd (apt-get install openssh-server)");
        Sshd(child)
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `client` can log in to `host` over ssh.
fn wait_for_sshd(client: &Host, host: &Host, keys: &Keys) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = client.command("sh");
        c.args(["-c", &format!("{} root@{} true", keys.rsh(), host.addr())]);
        if c.output().map(|o| o.status.success()).unwrap_or(false) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "sshd in {} never answered",
            host.name()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn lab_fan_out_over_ssh_survives_a_killed_node_and_names_a_host_without_sshd() {
    let _turn = crate::harness::lab_root("lab ssh fan-out");
    let lab = Lab::builder()
        .hosts(6)
        .link("rate 100mbit delay 5ms")
        .seed(5)
        .start()
        .expect("lab");
    let s = Scratch::new();
    let size = 24u64 << 20;
    write_file(&s.path("src/a.bin"), size, 11);
    for i in 0..10 {
        write_file(&s.path(&format!("src/small/f{i}")), 200 + i, i);
    }
    let hosts: Vec<&Host> = (2..=6).map(|h| lab.host(h)).collect();
    let keys = Keys::make(&s.path("keys"), &hosts);
    // h2..h5 run sshd; h6's is down.
    let _sshds: Vec<Sshd> = hosts[..4].iter().map(|h| Sshd::start(h, &keys)).collect();
    for h in &hosts[..4] {
        wait_for_sshd(lab.host(1), h, &keys);
    }
    let roots: Vec<PathBuf> = (2..=6)
        .map(|h| {
            let r = s.path(&format!("n{h}"));
            std::fs::create_dir_all(&r).unwrap();
            r
        })
        .collect();
    let dest = |i: usize| format!("root@{}:{}/", hosts[i].addr(), roots[i].display());
    let push = |dests: Vec<String>| {
        let mut cmd = lab.host(1).command(BIN);
        cmd.env("HAUL_CONFIG_DIR", s.path("client"))
            .args(["--json", "push"])
            .arg(s.path("src"))
            .args(dests)
            .args(["-e", &keys.rsh(), "--remote-haul", BIN]);
        cmd
    };
    // n3 (h3) is killed once it holds half of the large file.
    let victim = roots[1].clone();
    let killer = std::thread::spawn(move || {
        let deadline = Instant::now() + LIMIT;
        while Instant::now() < deadline && !staged(&victim, size / 2) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let pattern = format!("^{BIN} -q serve --ssh --root {}", victim.display());
        Command::new("pkill")
            .args(["-9", "-f", &pattern])
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    });
    let out = run(push((0..5).map(dest).collect()), LIMIT);
    assert!(killer.join().unwrap(), "the node in h3 was never killed");
    assert_eq!(out.status.code(), Some(23), "{}", said(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("node_not_started") && stdout.contains(&hosts[4].addr().to_string()),
        "h6 is not named: {}",
        said(&out)
    );
    // Everyone else holds the tree.
    for i in [0, 2, 3] {
        assert_eq!(
            listing(&roots[i].join("src")),
            listing(&s.path("src")),
            "n{}",
            i + 2
        );
    }
    // A rerun completes the killed node, sending only what it lacks.
    let out = run(push((0..4).map(dest).collect()), LIMIT);
    assert!(out.status.success(), "{}", said(&out));
    for r in &roots[..4] {
        assert_eq!(b3(&r.join("src/a.bin")), b3(&s.path("src/a.bin")));
    }
    // Striped trees over ssh: each large file in two halves, each down a
    // tree of its own, put together on every node.
    let striped = |i: usize| format!("root@{}:{}/striped", hosts[i].addr(), roots[i].display());
    let mut cmd = push((0..4).map(striped).collect());
    cmd.args(["--plan", "stripes:2"]);
    let out = run(cmd, LIMIT);
    assert!(out.status.success(), "{}", said(&out));
    for r in &roots[..4] {
        assert_eq!(listing(&r.join("striped/src")), listing(&s.path("src")));
    }
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn lab_push_over_ssh_runs_direct_over_quic_at_ten_percent_loss() {
    let _turn = crate::harness::lab_root("lab ssh quic");
    let lab = Lab::builder()
        .hosts(2)
        .link("rate 100mbit delay 5ms loss 10%")
        .seed(6)
        .start()
        .expect("lab");
    let s = Scratch::new();
    write_file(&s.path("src/a.bin"), 8 << 20, 12);
    let far = lab.host(2);
    let keys = Keys::make(&s.path("keys"), &[far]);
    let _sshd = Sshd::start(far, &keys);
    wait_for_sshd(lab.host(1), far, &keys);
    let root = s.path("far");
    std::fs::create_dir_all(&root).unwrap();
    let mut cmd = lab.host(1).command(BIN);
    cmd.env("HAUL_CONFIG_DIR", s.path("client"))
        .args(["-v", "push"])
        .arg(s.path("src/a.bin"))
        .arg(format!("root@{}:{}/", far.addr(), root.display()))
        .args([
            "--transport",
            "quic",
            "-e",
            &keys.rsh(),
            "--remote-haul",
            BIN,
        ]);
    let out = run(cmd, LIMIT);
    assert!(out.status.success(), "{}", said(&out));
    assert_eq!(b3(&root.join("a.bin")), b3(&s.path("src/a.bin")));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("connected directly to {}:", far.addr())) && err.contains("QUIC"),
        "{err}"
    );
}
