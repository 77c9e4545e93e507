//! `haul demo`: the whole path on loopback with nothing to set up. Starts a
//! node (TLS, token, pinned key), makes a sample dataset, pushes it, pulls it
//! back, and checks every file's BLAKE3 against the original.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use haul_node::{ClientOptions, NodePath, NodeUrl, ServeOptions, Server, Summary};
use haul_transport::{KnownHosts, Listener, Security, ServerIdentity, Timeouts};

use crate::cli::DemoArgs;
use crate::output::{human_bytes, json_line, print_summary, Display, Mode};

/// Writes the sample dataset; returns (files, bytes).
fn make_dataset(root: &Path, big_mib: u64) -> Result<(u64, u64)> {
    let mut files = 0;
    let mut bytes = 0;
    let mut write = |path: PathBuf, len: u64, seed: u64| -> Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
        let mut xof = blake3::Hasher::new()
            .update(&seed.to_le_bytes())
            .finalize_xof();
        let mut buf = vec![0u8; 1 << 20];
        let mut left = len;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            xof.fill(&mut buf[..n]);
            f.write_all(&buf[..n])?;
            left -= n as u64;
        }
        f.flush()?;
        files += 1;
        bytes += len;
        Ok(())
    };
    write(root.join("big.bin"), big_mib << 20, 1)?;
    for i in 0..200u64 {
        let len = 512 + (i * 7919) % (64 << 10);
        write(
            root.join(format!("small/{:03}/{i:04}.dat", i / 50)),
            len,
            100 + i,
        )?;
    }
    write(root.join("nested/a/b/c/deep.txt"), 4096, 2)?;
    write(root.join("name with spaces ü.txt"), 1234, 3)?;
    write(root.join("empty-file"), 0, 4)?;
    std::fs::create_dir_all(root.join("empty-dir"))?;
    Ok((files, bytes))
}

/// BLAKE3 of every file under `root`, by relative path.
fn hash_tree(root: &Path) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                stack.push(path);
            } else {
                let mut h = blake3::Hasher::new();
                h.update_reader(std::fs::File::open(&path)?)?;
                let rel = path.strip_prefix(root)?.to_string_lossy().into_owned();
                out.push((rel, h.finalize().to_hex().to_string()));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn say(mode: Mode, text: &str) {
    if mode == Mode::Human {
        eprintln!("{text}");
    }
}

/// Runs the demo.
pub async fn run(args: DemoArgs, mode: Mode) -> Result<u8> {
    if args.size == 0 || args.size > 64 << 10 {
        bail!("--size must be between 1 and 65536 MiB");
    }
    let dir = std::env::temp_dir().join(format!("haul-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let result = demo(&dir, &args, mode).await;
    if args.keep {
        say(mode, &format!("kept {}", dir.display()));
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn demo(dir: &Path, args: &DemoArgs, mode: Mode) -> Result<u8> {
    let source = dir.join("dataset");
    say(
        mode,
        &format!("haul demo — everything on loopback in {}\n", dir.display()),
    );
    let t = Instant::now();
    let (files, bytes) =
        make_dataset(&source, args.size).context("cannot write the sample dataset")?;
    say(mode, &format!("1. made a sample dataset: {files} files, {} (one {} MiB file, 200 small ones, nested and empty dirs, unicode names) in {:.1}s", human_bytes(bytes), args.size, t.elapsed().as_secs_f64()));

    let identity = ServerIdentity::generate()?;
    let fingerprint = identity.fingerprint();
    let token = blake3::hash(format!("{:?}{}", Instant::now(), std::process::id()).as_bytes())
        .to_hex()[..32]
        .to_owned();
    let node_root = dir.join("node");
    let server = Server::new(ServeOptions {
        root: node_root.clone(),
        tokens: vec![token.clone()],
        timeouts: Timeouts::default(),
        window: haul_node::DEFAULT_WINDOW,
        max_retries: 5,
        grace: Duration::from_secs(5),
        chunk_memory: haul_node::buffers::DEFAULT_BUDGET,
        log: Default::default(),
        partial_ttl: None,
        read_only: false,
        keep_owners: false,
        jump_to: Vec::new(),
        watch: false,
    })?;
    let listener = Listener::bind("127.0.0.1:0".parse()?, Some(&identity), None).await?;
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let node = tokio::spawn(server.serve(
        listener,
        None,
        async move {
            let _ = stop_rx.await;
        },
        std::future::pending(),
    ));
    say(
        mode,
        &format!("2. started a node on {addr} (TLS 1.3, key {fingerprint}, token auth)"),
    );

    let opts = ClientOptions {
        security: Security::Tls {
            fingerprint: Some(fingerprint.clone()),
            known_hosts: KnownHosts::new(dir.join("known_hosts")),
        },
        token,
        ..ClientOptions::default()
    };
    let display = Arc::new(Display::new(mode));
    let remote = NodePath::network(&NodeUrl::parse(&format!("haul://{addr}/incoming"))?, &opts);
    let pushed = haul_node::push(
        &[source.display().to_string()],
        &remote,
        &opts,
        display.clone(),
    )
    .await?;
    display.finish();
    step(mode, "3. pushed it to the node", &pushed);

    let pulled_dir = dir.join("pulled");
    let remote = NodePath::network(
        &NodeUrl::parse(&format!("haul://{addr}/incoming/dataset"))?,
        &opts,
    );
    let display = Arc::new(Display::new(mode));
    let pulled = haul_node::pull(&remote, &pulled_dir, &opts, display.clone()).await?;
    display.finish();
    step(mode, "4. pulled it back", &pulled);

    let _ = stop_tx.send(());
    let _ = node.await;

    let original = hash_tree(&source)?;
    let on_node = hash_tree(&node_root.join("incoming/dataset"))?;
    let back = hash_tree(&pulled_dir.join("dataset"))?;
    let same = original == on_node && original == back;
    let big = original
        .iter()
        .find(|(p, _)| p == "big.bin")
        .map(|(_, h)| h.clone())
        .unwrap_or_default();
    if mode == Mode::Json {
        print_summary(mode, &pushed);
        print_summary(mode, &pulled);
        json_line(&serde_json::json!({
            "event": "demo", "files": files, "bytes": bytes, "verified": same,
            "push_bytes_per_sec": pushed.rate(), "pull_bytes_per_sec": pulled.rate(),
            "big_file_blake3": big, "fingerprint": fingerprint,
        }));
    } else {
        say(
            mode,
            &format!(
                "5. compared BLAKE3 of all {} files: original = on the node = pulled back: {}",
                original.len(),
                if same { "yes" } else { "NO" }
            ),
        );
        say(mode, &format!("   big.bin  blake3 {big}"));
        say(mode, "\nEvery chunk was checked against its BLAKE3 digest on arrival and every file's hash before it got its final name.\nNext: `haul serve --root DIR --token-file FILE` on one machine, `haul push PATH haul://HOST:7878/DEST --token-file FILE` on another.");
    }
    if !same || pushed.failed > 0 || pulled.failed > 0 {
        bail!("the demo found differences: this is a bug, please report it with `haul demo --keep -v`");
    }
    Ok(0)
}

fn step(mode: Mode, what: &str, s: &Summary) {
    if mode == Mode::Human {
        eprintln!(
            "{what}: {} files, {} in {:.2}s = {}/s over {} connection(s)",
            s.files_ok,
            human_bytes(s.bytes_verified),
            s.seconds,
            human_bytes(s.rate() as u64),
            s.connections
        );
    }
}
