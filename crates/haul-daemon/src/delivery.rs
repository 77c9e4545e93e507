//! After each file and each run: the metadata sidecar (`NAME.haul.json`
//! beside the delivered file, for ingest crawlers) and the hooks
//! (`on_file`, `on_run`: `sh -c COMMAND` with the facts in `HAUL_*`
//! environment variables and as JSON on stdin, killed after the timeout).
//! A hook that fails or hangs is logged and counted; the file stays
//! delivered.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncWriteExt;

/// A delivered file's facts: the sidecar's JSON, a hook's stdin.
#[derive(Debug, Clone, Serialize)]
pub struct FileFacts {
    /// `file` (fetched), or `delivered` (confirmed by a site: `on_deliver`).
    pub event: &'static str,
    /// The source's name.
    pub source: String,
    /// The remote file's URL (no secrets).
    pub url: String,
    /// Its path relative to the source.
    pub path: String,
    /// Where it was delivered.
    pub local_path: String,
    /// Its size.
    pub size: u64,
    /// The remote mtime (Unix seconds), if the source told it.
    pub remote_mtime: Option<i64>,
    /// The remote ETag, if any.
    pub etag: Option<String>,
    /// The source's checksums, verified over the data before delivery.
    pub checksums_verified: Vec<String>,
    /// Whole-file BLAKE3 (hex).
    pub blake3: String,
    /// When it was delivered (Unix seconds).
    pub fetched_at: i64,
    /// The worker that fetched it.
    pub worker: String,
    /// The site that confirmed it (`on_deliver` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// Where it went there (`haul://HOST:PORT/DIR/PATH`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site_url: Option<String>,
    /// When the site confirmed it (Unix seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<i64>,
}

/// A run's facts for `on_run`.
#[derive(Debug, Clone, Serialize)]
pub struct RunFacts {
    /// `run`.
    pub event: &'static str,
    /// The source's name.
    pub source: String,
    /// The run's id in the catalog.
    pub run_id: i64,
    /// Files listed (after the filters), claimed, fetched, failed; bytes.
    pub listed: u64,
    /// Files claimed.
    pub claimed: u64,
    /// Files delivered.
    pub fetched: u64,
    /// Files failed.
    pub failed: u64,
    /// Bytes delivered.
    pub bytes: u64,
    /// Why the run could not list the source, if it could not.
    pub error: Option<String>,
    /// The worker.
    pub worker: String,
}

/// Writes `facts` as `NAME.haul.json` beside `dest_rel` under `dest`,
/// beneath the destination's held directories, atomically (an anonymous
/// file linked under a temporary name, then renamed over the final one).
pub fn write_sidecar(dest: &Path, dest_rel: &str, facts: &FileFacts) -> std::io::Result<()> {
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let root = haul_root::Root::open(dest)?;
    let comps: Vec<&str> = dest_rel.split('/').filter(|c| !c.is_empty()).collect();
    let Some((name, parents)) = comps.split_last() else {
        return Err(std::io::Error::other("empty path"));
    };
    let dir = root
        .open_dir(parents)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut file = dir.tmpfile(0o644)?;
    let text = serde_json::to_vec_pretty(facts).map_err(std::io::Error::other)?;
    file.write_all(&text)?;
    file.write_all(b"\n")?;
    file.sync_all()?;
    let tmp = format!(
        ".{name}.haul.json.{}-{}.tmp",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    );
    dir.link_file(&file, &tmp)?;
    dir.rename(&tmp, &dir, format!("{name}.haul.json"))
        .inspect_err(|_| {
            let _ = dir.unlink(&tmp);
        })
}

/// How a hook ended, when not well.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// It could not start.
    #[error("could not start: {0}")]
    Spawn(std::io::Error),
    /// It exited with a failure.
    #[error("exited with {status}: {stderr}")]
    Failed {
        /// Exit status.
        status: std::process::ExitStatus,
        /// The end of its stderr.
        stderr: String,
    },
    /// It ran past the timeout and was killed.
    #[error("still running after {0:?}: killed")]
    TimedOut(Duration),
}

/// Runs `sh -c command` with `env` and `json` on stdin, within `timeout`.
pub async fn run_hook(
    command: &str,
    env: &[(String, String)],
    json: &serde_json::Value,
    timeout: Duration,
) -> Result<(), HookError> {
    let mut child = tokio::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0)
        .spawn()
        .map_err(HookError::Spawn)?;
    let pid = child.id();
    let input = format!("{json}\n");
    let mut stdin = child.stdin.take();
    let run = async {
        if let Some(s) = stdin.as_mut() {
            // A hook that does not read its stdin is not an error.
            let _ = s.write_all(input.as_bytes()).await;
        }
        drop(stdin);
        child.wait_with_output().await
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(Ok(out)) if out.status.success() => Ok(()),
        Ok(Ok(out)) => {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: String = err
                .trim()
                .chars()
                .rev()
                .take(300)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            Err(HookError::Failed {
                status: out.status,
                stderr: tail,
            })
        }
        Ok(Err(e)) => Err(HookError::Spawn(e)),
        Err(_) => {
            // The whole process group: a shell's children too.
            if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
                }
            }
            Err(HookError::TimedOut(timeout))
        }
    }
}

/// Every variable a hook gets ([`file_env`], [`run_env`]): a `haul` a hook
/// runs must not read any of them as a flag (`HAUL_<FLAG>`).
pub const HOOK_VARIABLES: &[&str] = &[
    "HAUL_EVENT",
    "HAUL_SOURCE",
    "HAUL_URL",
    "HAUL_PATH",
    "HAUL_LOCAL_PATH",
    "HAUL_SIZE",
    "HAUL_BLAKE3",
    "HAUL_FETCHED_AT",
    "HAUL_WORKER",
    "HAUL_REMOTE_MTIME",
    "HAUL_ETAG",
    "HAUL_SITE",
    "HAUL_SITE_URL",
    "HAUL_DELIVERED_AT",
    "HAUL_RUN_ID",
    "HAUL_LISTED",
    "HAUL_CLAIMED",
    "HAUL_FETCHED",
    "HAUL_FAILED",
    "HAUL_BYTES",
    "HAUL_ERROR",
];

/// `HAUL_*` variables of a file's facts.
pub fn file_env(f: &FileFacts) -> Vec<(String, String)> {
    let mut env = vec![
        ("HAUL_EVENT".into(), f.event.into()),
        ("HAUL_SOURCE".into(), f.source.clone()),
        ("HAUL_URL".into(), f.url.clone()),
        ("HAUL_PATH".into(), f.path.clone()),
        ("HAUL_LOCAL_PATH".into(), f.local_path.clone()),
        ("HAUL_SIZE".into(), f.size.to_string()),
        ("HAUL_BLAKE3".into(), f.blake3.clone()),
        ("HAUL_FETCHED_AT".into(), f.fetched_at.to_string()),
        ("HAUL_WORKER".into(), f.worker.clone()),
    ];
    if let Some(t) = f.remote_mtime {
        env.push(("HAUL_REMOTE_MTIME".into(), t.to_string()));
    }
    if let Some(e) = &f.etag {
        env.push(("HAUL_ETAG".into(), e.clone()));
    }
    if let (Some(site), Some(url), Some(at)) = (&f.site, &f.site_url, f.delivered_at) {
        env.push(("HAUL_SITE".into(), site.clone()));
        env.push(("HAUL_SITE_URL".into(), url.clone()));
        env.push(("HAUL_DELIVERED_AT".into(), at.to_string()));
    }
    env
}

/// `HAUL_*` variables of a run's facts.
pub fn run_env(r: &RunFacts) -> Vec<(String, String)> {
    let mut env = vec![
        ("HAUL_EVENT".into(), "run".into()),
        ("HAUL_SOURCE".into(), r.source.clone()),
        ("HAUL_RUN_ID".into(), r.run_id.to_string()),
        ("HAUL_LISTED".into(), r.listed.to_string()),
        ("HAUL_CLAIMED".into(), r.claimed.to_string()),
        ("HAUL_FETCHED".into(), r.fetched.to_string()),
        ("HAUL_FAILED".into(), r.failed.to_string()),
        ("HAUL_BYTES".into(), r.bytes.to_string()),
        ("HAUL_WORKER".into(), r.worker.clone()),
    ];
    if let Some(e) = &r.error {
        env.push(("HAUL_ERROR".into(), e.clone()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hook_variable_is_listed() {
        let file = FileFacts {
            event: "delivered",
            source: "s".into(),
            url: "u".into(),
            path: "p".into(),
            local_path: "l".into(),
            size: 1,
            remote_mtime: Some(1),
            etag: Some("e".into()),
            checksums_verified: Vec::new(),
            blake3: "b".into(),
            fetched_at: 1,
            worker: "w".into(),
            site: Some("a".into()),
            site_url: Some("haul://a/x".into()),
            delivered_at: Some(2),
        };
        let run = RunFacts {
            event: "run",
            source: "s".into(),
            run_id: 1,
            listed: 1,
            claimed: 1,
            fetched: 1,
            failed: 0,
            bytes: 1,
            error: Some("e".into()),
            worker: "w".into(),
        };
        for (name, _) in file_env(&file).into_iter().chain(run_env(&run)) {
            assert!(
                HOOK_VARIABLES.contains(&name.as_str()),
                "{name} is not in HOOK_VARIABLES"
            );
        }
    }

    #[tokio::test]
    async fn hooks_succeed_fail_and_time_out() {
        let json = serde_json::json!({"a": 1});
        let env = vec![("HAUL_X".to_string(), "y".to_string())];
        run_hook(
            "test \"$HAUL_X\" = y && grep -q '\"a\":1'",
            &env,
            &json,
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        let e = run_hook(
            "echo broken >&2; exit 3",
            &env,
            &json,
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains("broken"), "{e}");
        let t0 = std::time::Instant::now();
        let e = run_hook("sleep 30", &env, &json, Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(matches!(e, HookError::TimedOut(_)), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn sidecar_beside_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        let facts = FileFacts {
            event: "file",
            source: "s".into(),
            url: "http://h/a/x.nc".into(),
            path: "a/x.nc".into(),
            local_path: "/d/a/x.nc".into(),
            size: 5,
            remote_mtime: Some(7),
            etag: None,
            checksums_verified: vec![],
            blake3: "ab".into(),
            fetched_at: 9,
            worker: "w".into(),
            site: None,
            site_url: None,
            delivered_at: None,
        };
        write_sidecar(dir.path(), "a/x.nc", &facts).unwrap();
        write_sidecar(dir.path(), "a/x.nc", &facts).unwrap();
        let text = std::fs::read_to_string(dir.path().join("a/x.nc.haul.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["blake3"], "ab");
        assert_eq!(std::fs::read_dir(dir.path().join("a")).unwrap().count(), 1);
    }
}
