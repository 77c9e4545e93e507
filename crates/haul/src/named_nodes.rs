//! Named nodes from the client's configuration file (rclone's remotes):
//!
//! ```toml
//! [node.one]
//! url = "haul://a.example:7878"
//! token_file = "/etc/haul/one.token"
//! fingerprint = "SHA256:..."      # optional: pin its key
//! transport = "quic"              # optional
//! ```
//!
//! `haul://one/PATH` then names `haul://a.example:7878/PATH`, dialled with
//! that node's token, key and transport — so one fan-out reaches nodes with
//! different tokens. The file is `--config FILE`, else
//! `$HAUL_CONFIG_DIR/config.toml` (`~/.config/haul/config.toml`) when it
//! exists; a relative `token_file` is relative to the file. A node's own
//! `token_file` is its token: the command's `--token`/`HAUL_TOKEN` is for
//! the nodes without one (in a fan-out, a token meant for one node never
//! goes to a named other). `--fingerprint` and `--transport` (and
//! `HAUL_TRANSPORT`) beat the file. A configured name wins over a host of
//! that name (`haul://one:7878/` names the host); an unnamed URL with a
//! named node's address is reached as that node. A node is checked with
//! the command's flags when a command uses it, so one bad table does not
//! stop commands that do not name it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use haul_node::{ByAddress, ClientOptions, NodeUrl, Reach};
use serde::Deserialize;

use crate::cli::TransferArgs;
use crate::config;

/// The client's configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientFile {
    /// Named nodes.
    #[serde(default)]
    node: BTreeMap<String, NamedNode>,
}

/// One `[node.NAME]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct NamedNode {
    /// `haul://HOST[:PORT]`, no path.
    url: String,
    /// The file holding its token (first line).
    token_file: Option<PathBuf>,
    /// Its key, pinned (`SHA256:...`).
    fingerprint: Option<String>,
    /// `tcp` or `quic`.
    transport: Option<String>,
}

/// The named nodes, by name and by the address each stands for.
#[derive(Debug, Default)]
pub struct NamedNodes {
    /// The file they came from.
    file: Option<PathBuf>,
    by_name: BTreeMap<String, NodeUrl>,
    /// Each named node (its name) and its connection flags: the command's
    /// own with the node's token, and its key and transport where the
    /// command gave none.
    by_addr: HashMap<String, (String, TransferArgs)>,
}

impl NamedNodes {
    /// The nodes `t`'s `--config` (or the default file, if there is one)
    /// names; none without a file.
    pub fn load(t: &TransferArgs) -> Result<Self> {
        let (path, given) = match &t.config {
            Some(p) => (p.clone(), true),
            None => (haul_transport::config_dir().join("config.toml"), false),
        };
        if !given && !path.exists() {
            return Ok(Self::default());
        }
        Self::read(&path, t)
    }

    fn read(path: &Path, t: &TransferArgs) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the client config {}", path.display()))?;
        let file: ClientFile =
            toml::from_str(&text).with_context(|| format!("client config {}", path.display()))?;
        let mut nodes = Self {
            file: Some(path.to_path_buf()),
            ..Self::default()
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        for (name, node) in file.node {
            if name.is_empty() || name.contains([':', '/', '[', ']']) {
                bail!(
                    "{}: [node.{name}]: a node's name is a plain word (no : / [ ])",
                    path.display()
                );
            }
            if node.url.trim_start_matches("haul://").contains('/') {
                bail!(
                    "{}: [node.{name}] url {:?}: give haul://HOST:PORT without a path (the path goes after the name: haul://{name}/PATH)",
                    path.display(),
                    node.url
                );
            }
            let url = NodeUrl::parse(&node.url)
                .with_context(|| format!("{}: [node.{name}] url", path.display()))?;
            let mut flags = t.clone();
            if let Some(file) = &node.token_file {
                flags.token = None;
                flags.token_file = Some(dir.join(file));
            }
            if flags.fingerprint.is_none() {
                flags.fingerprint.clone_from(&node.fingerprint);
            }
            if flags.transport.is_none() {
                flags.transport.clone_from(&node.transport);
            }
            if let Some((other, _)) = nodes.by_addr.get(&url.addr) {
                bail!(
                    "{}: [node.{other}] and [node.{name}] name one address ({}): give each node one table",
                    path.display(),
                    url.addr
                );
            }
            nodes
                .by_addr
                .insert(url.addr.clone(), (name.clone(), flags));
            nodes.by_name.insert(name, url);
        }
        Ok(nodes)
    }

    /// `text` with a named node's address in place of its name
    /// (`haul://one/d` → `haul://a.example:7878/d`); anything else as it is.
    pub fn rewrite(&self, text: &str) -> String {
        let Some(rest) = text.strip_prefix("haul://") else {
            return text.to_owned();
        };
        let (name, path) = rest.split_once('/').unwrap_or((rest, ""));
        match self.by_name.get(name) {
            Some(url) => format!("haul://{}/{path}", url.addr),
            None => text.to_owned(),
        }
    }

    /// `opts` with the connection settings of the named node `text` (a
    /// `haul://` URL, rewritten) stands for, when it is one.
    pub fn options_for(&self, text: &str, opts: ClientOptions) -> Result<ClientOptions> {
        let Some(node) = NodeUrl::parse(text)
            .ok()
            .and_then(|u| self.by_addr.get(&u.addr))
        else {
            return Ok(opts);
        };
        Ok(connecting_as(opts, self.checked(node)?))
    }

    /// A node's connection options, checked as the command's flags are.
    fn checked(&self, (name, flags): &(String, TransferArgs)) -> Result<ClientOptions> {
        let file = self.file.as_deref().unwrap_or(Path::new("config"));
        config::client_options(flags).with_context(|| format!("{}: [node.{name}]", file.display()))
    }

    /// How a fan-out to `dests` reaches its nodes: a named node with its own
    /// settings (only those the fan-out goes to are checked), any other as
    /// `otherwise` does.
    pub fn reach(
        &self,
        opts: &ClientOptions,
        dests: &[NodeUrl],
        otherwise: Arc<dyn Reach>,
    ) -> Result<Arc<dyn Reach>> {
        let mut named = HashMap::new();
        for url in dests {
            if let Some(node) = self.by_addr.get(&url.addr) {
                let own = connecting_as(opts.clone(), self.checked(node)?);
                named.insert(url.addr.clone(), own);
            }
        }
        if named.is_empty() {
            return Ok(otherwise);
        }
        Ok(Arc::new(ByAddress {
            options: named,
            otherwise,
            via: std::collections::HashMap::new(),
        }))
    }
}

impl NamedNodes {
    /// `haul config show`: the file, how each named node is reached with
    /// the command's flags — which token, key and transport win — and the
    /// `HAUL_<FLAG>` variables set, which beat the file and lose to flags.
    pub fn show(&self, json: bool) {
        let environment = crate::cli::variables_set();
        let nodes: Vec<serde_json::Value> = self
            .by_name
            .iter()
            .map(|(name, url)| {
                let flags = self.by_addr.get(&url.addr).map(|(_, f)| f);
                let token = match flags {
                    Some(f) if f.token.is_some() => {
                        "--token or HAUL_TOKEN (the node names no token_file)".to_owned()
                    }
                    Some(f) => f
                        .token_file
                        .as_ref()
                        .map_or("none".to_owned(), |p| format!("file {}", p.display())),
                    None => "none".to_owned(),
                };
                serde_json::json!({
                    "name": name,
                    "url": format!("haul://{}", url.addr),
                    "token": token,
                    "fingerprint": flags.and_then(|f| f.fingerprint.clone()),
                    "transport": flags.and_then(|f| f.transport.clone()).unwrap_or_else(|| "auto".into()),
                })
            })
            .collect();
        if json {
            let environment: Vec<_> = environment
                .iter()
                .map(|v| serde_json::json!({ "variable": v.name, "value": v.shown, "flags": v.flags }))
                .collect();
            crate::output::json_line(&serde_json::json!({
                "event": "config",
                "file": self.file.as_ref().map(|p| p.display().to_string()),
                "nodes": nodes,
                "environment": environment,
            }));
            return;
        }
        match &self.file {
            Some(p) => println!("client config: {}", p.display()),
            None => println!(
                "client config: none ({} does not exist)",
                haul_transport::config_dir().join("config.toml").display()
            ),
        }
        for n in &nodes {
            println!(
                "node {}: {} (token: {}; key: {}; transport: {})",
                n["name"].as_str().unwrap_or_default(),
                n["url"].as_str().unwrap_or_default(),
                n["token"].as_str().unwrap_or_default(),
                n["fingerprint"].as_str().unwrap_or("pinned on first use"),
                n["transport"].as_str().unwrap_or_default(),
            );
        }
        if environment.is_empty() {
            println!("environment: no HAUL_<FLAG> variable set");
        }
        for v in &environment {
            println!(
                "environment: {}={} (for {}; a flag on the command line wins)",
                v.name,
                v.shown,
                v.flags.join(", ")
            );
        }
    }
}

/// `opts` with how `node` connects: its token, security and transport.
fn connecting_as(mut opts: ClientOptions, node: ClientOptions) -> ClientOptions {
    opts.token = node.token;
    opts.security = node.security;
    opts.transport = node.transport;
    opts
}
