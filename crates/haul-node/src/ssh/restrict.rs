//! `haul serve --ssh --restrict DIR` as a forced command in
//! `authorized_keys` (rrsync's job): the key can run haul's own far-side
//! requests only, for roots beneath DIR only, and with `--read-only` only
//! pulls, listings and checks.
//!
//! sshd runs the forced command and puts what the client asked for in
//! `SSH_ORIGINAL_COMMAND`; that is read as data ([`Forced::parse`]), never
//! run. The root it names is opened beneath DIR's held descriptor with no
//! symlink followed ([`Confined::beneath`]), and the node's own root is
//! then checked to be that same directory ([`Confined::holds`]), so a
//! directory swapped for a symlink in between is refused, not served.

use std::path::{Path, PathBuf};

use haul_root::Root;

use crate::Server;

/// What a client asked the far side for (parsed from its command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forced {
    /// `--stdio` (over the ssh channel) rather than `--ssh` (a direct port).
    pub stdio: bool,
    /// The `--root` it named, as given.
    pub root: String,
    /// It asked for `--read-only` itself.
    pub read_only: bool,
}

impl Forced {
    /// `cmd` (`SSH_ORIGINAL_COMMAND`) as a far-side request: `… serve
    /// --ssh|--stdio [-q] [--read-only] [--root DIR]`, whatever names the
    /// program. Anything else is refused, with what was asked.
    pub fn parse(cmd: &str) -> Result<Self, String> {
        let refuse = || {
            format!("this ssh key runs haul transfers only (a forced command with --restrict); it was asked to run {cmd:?}")
        };
        let words = shlex::split(cmd).ok_or_else(refuse)?;
        let serve = words.iter().position(|w| w == "serve").ok_or_else(refuse)?;
        let mut forced = Self {
            stdio: false,
            root: String::new(),
            read_only: false,
        };
        let mut mode = None;
        let mut rest = words[serve + 1..].iter();
        while let Some(word) = rest.next() {
            match word.as_str() {
                "--stdio" | "--ssh" if mode.is_none() => mode = Some(word == "--stdio"),
                "--read-only" => forced.read_only = true,
                "-q" | "--quiet" => {}
                "--root" => forced.root.clone_from(rest.next().ok_or_else(refuse)?),
                _ => return Err(refuse()),
            }
        }
        forced.stdio = mode.ok_or_else(refuse)?;
        Ok(forced)
    }
}

/// A root confined beneath the `--restrict` directory, opened and known by
/// its identity.
#[derive(Debug)]
pub struct Confined {
    /// Its path, to open the node on.
    pub path: PathBuf,
    /// Device and inode of the directory opened beneath DIR.
    identity: (u64, u64),
}

impl Confined {
    /// `root` (absolute, or relative to `dir`) beneath `dir`: every
    /// component opened from `dir`'s descriptor, no symlink followed, no
    /// `..`. An error names what was refused.
    pub fn beneath(dir: &Path, root: &str) -> Result<Self, String> {
        let held = Root::open(dir)
            .map_err(|e| format!("--restrict {}: cannot open it: {e}", dir.display()))?;
        let base = held.path().to_path_buf();
        let outside = || {
            format!(
                "{root:?} is outside {}, the only directory this ssh key may reach",
                base.display()
            )
        };
        let rel = if root.starts_with('/') {
            let asked = Path::new(root);
            asked
                .strip_prefix(&base)
                .or_else(|_| asked.strip_prefix(dir))
                .map_err(|_| outside())?
                .to_path_buf()
        } else {
            PathBuf::from(root)
        };
        let rel = rel.to_str().ok_or_else(outside)?.to_owned();
        let comps: Vec<&str> = rel
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        if comps.contains(&"..") {
            return Err(outside());
        }
        let opened = held.open_dir(&comps).map_err(|e| {
            format!(
                "{root:?} beneath {}: {e} (symlinks are not followed)",
                base.display()
            )
        })?;
        let meta = opened
            .meta()
            .map_err(|e| format!("{root:?}: cannot stat it: {e}"))?;
        Ok(Self {
            path: comps.iter().fold(base.clone(), |p, c| p.join(c)),
            identity: (meta.dev, meta.ino),
        })
    }

    /// Whether `server` serves the very directory that was confined.
    pub fn holds(&self, server: &Server) -> bool {
        server.root_identity().ok() == Some(self.identity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_haul_serve_requests_pass_the_forced_command() {
        let f = Forced::parse("haul -q serve --ssh --root '/data/in coming'").unwrap();
        assert_eq!(
            (f.stdio, f.root.as_str(), f.read_only),
            (false, "/data/in coming", false)
        );
        let f = Forced::parse("/opt/haul -q serve --stdio --read-only --root x").unwrap();
        assert!(f.stdio && f.read_only);
        for bad in [
            "rm -rf /",
            "haul serve --ssh --root /x --listen 0.0.0.0:1",
            "haul serve --root /x",
            "haul serve --ssh --stdio --root /x",
            "haul serve --ssh --root",
        ] {
            assert!(Forced::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn roots_outside_or_through_symlinks_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("in");
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::create_dir_all(tmp.path().join("secret")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret"), dir.join("link")).unwrap();
        let abs = dir.join("a").to_str().unwrap().to_owned();
        assert!(Confined::beneath(&dir, &abs)
            .unwrap()
            .path
            .ends_with("in/a"));
        assert!(Confined::beneath(&dir, "a/b")
            .unwrap()
            .path
            .ends_with("a/b"));
        assert!(Confined::beneath(&dir, "").unwrap().path.ends_with("in"));
        let secret = tmp.path().join("secret");
        for bad in [
            secret.to_str().unwrap(),
            "../secret",
            "a/../../secret",
            "link",
            "/etc",
        ] {
            assert!(Confined::beneath(&dir, bad).is_err(), "{bad}");
        }
    }
}
