//! A daemon source's and site's keys for reaching haul nodes: which
//! belong to which kind of source (a remote, a `haul://` node, a node
//! started over ssh), refused with what to write instead, and how they
//! become `haul push`/`haul pull`'s flags.

use anyhow::{bail, Result};
use std::path::PathBuf;
use toml::Spanned;

use super::{NodeSource, SourceConfig};
use crate::cli::TransferArgs;
use crate::location::NodeAt;

/// The keys of a remote source (FTP, SFTP, HTTP, S3) and of a node
/// source, each refused on the other kind, naming what to do.
pub(super) fn check_keys_fit(s: &SourceConfig, node: Option<&NodeAt>) -> Result<()> {
    if let Some(NodeAt::Ssh(_)) = node {
        offered_over_ssh(&s.token_file, &s.fingerprint, &s.known_hosts, s.plaintext)?;
        // What an sftp:// source takes from these keys, ssh takes from its
        // own command line and the URL.
        let ssh_says = [
            ("user", s.user.is_some(), "user@ in the url"),
            ("ssh_key", !s.ssh_key.is_empty(), "rsh = \"ssh -i KEY\""),
            (
                "ssh_known_hosts",
                s.ssh_known_hosts.is_some(),
                "rsh = \"ssh -o UserKnownHostsFile=FILE\"",
            ),
        ];
        if let Some((key, _, instead)) = ssh_says.iter().find(|(_, on, _)| *on) {
            bail!("{key} is for sftp:// sources: a node reached over ssh takes it from ssh, as {instead}");
        }
    }
    if let Some(NodeAt::Haul(_)) = node {
        ssh_keys_only_over_ssh(&s.rsh, &s.remote_haul, s.ssh_tunnel, s.ssh_install)?;
    }
    let node = node.is_some();
    let remote_only = [
        ("rename", s.rename.is_some()),
        ("verify_sidecar", s.verify_sidecar),
        ("delete_source", s.delete_source),
        ("max_conn", s.max_conn.is_some()),
        ("user", s.user.is_some()),
        ("password_file", s.password_file.is_some()),
        ("password_env", s.password_env.is_some()),
        ("ssh_key", !s.ssh_key.is_empty()),
        ("ssh_known_hosts", s.ssh_known_hosts.is_some()),
        ("accept_new_host_key", s.accept_new_host_key),
        ("ca_cert", s.ca_cert.is_some()),
        ("insecure", s.insecure),
        ("s3_endpoint", s.s3_endpoint.is_some()),
        ("s3_region", s.s3_region.is_some()),
        ("s3_path_style", s.s3_path_style),
    ];
    let node_only = [
        ("token_file", s.token_file.is_some()),
        ("fingerprint", s.fingerprint.is_some()),
        ("known_hosts", s.known_hosts.is_some()),
        ("transport", s.transport.is_some()),
        ("plaintext", s.plaintext),
        ("rsh", s.rsh.is_some()),
        ("remote_haul", s.remote_haul.is_some()),
        ("ssh_tunnel", s.ssh_tunnel),
        ("ssh_install", s.ssh_install),
    ];
    let (wrong, kind, other) = match node {
        true => (
            &remote_only[..],
            "a haul node",
            "FTP, SFTP, HTTP and S3 sources",
        ),
        false => (
            &node_only[..],
            "an FTP, SFTP, HTTP or S3 remote",
            "haul node sources (haul:// and host:DIR)",
        ),
    };
    refuse_keys(wrong, &format!("for {other} only: this source is {kind}"))
}

/// The keys of `keys` that are set, refused in one line: `why` they do
/// not belong.
fn refuse_keys(keys: &[(&str, bool)], why: &str) -> Result<()> {
    let set: Vec<&str> = keys.iter().filter(|(_, on)| *on).map(|(k, _)| *k).collect();
    if !set.is_empty() {
        bail!(
            "{} {} {why}; remove {}",
            set.join(", "),
            if set.len() == 1 { "is" } else { "are" },
            if set.len() == 1 { "it" } else { "them" }
        );
    }
    Ok(())
}

/// A node source's options: how it is reached (token, key, transport,
/// ssh) on top of the source's own `-j`, `--streams`, timeout, retries.
pub(super) fn node_source(
    s: &SourceConfig,
    node_at: NodeAt,
    transfer: &TransferArgs,
    at: &dyn Fn(std::ops::Range<usize>) -> String,
) -> Result<NodeSource> {
    // The directory's contents come to dest, as from any other source.
    let node_at = node_at.naming_contents();
    let mut transfer = transfer.clone();
    NodeKeys {
        token_file: &s.token_file,
        fingerprint: &s.fingerprint,
        known_hosts: &s.known_hosts,
        plaintext: s.plaintext,
        transport: &s.transport,
    }
    .apply(&mut transfer, at)?;
    SshKeys {
        rsh: &s.rsh,
        remote_haul: &s.remote_haul,
        tunnel: s.ssh_tunnel,
        install: s.ssh_install,
    }
    .apply(&mut transfer);
    // Read now (the token file too), not at the first run.
    let client = crate::config::client_options(&transfer)?;
    Ok(NodeSource {
        at: node_at,
        client,
    })
}

/// The keys that say how a node is reached, a site's or a node source's.
pub(super) struct NodeKeys<'a> {
    pub(super) token_file: &'a Option<PathBuf>,
    pub(super) fingerprint: &'a Option<String>,
    pub(super) known_hosts: &'a Option<PathBuf>,
    pub(super) plaintext: bool,
    pub(super) transport: &'a Option<Spanned<String>>,
}

impl NodeKeys<'_> {
    /// Onto `haul push`'s and `haul pull`'s flags.
    pub(super) fn apply(
        &self,
        transfer: &mut TransferArgs,
        at: &dyn Fn(std::ops::Range<usize>) -> String,
    ) -> Result<()> {
        transfer.token_file.clone_from(self.token_file);
        transfer.fingerprint.clone_from(self.fingerprint);
        transfer.known_hosts.clone_from(self.known_hosts);
        transfer.plaintext = self.plaintext;
        if let Some(t) = self.transport {
            match t.get_ref().as_str() {
                "auto" | "tcp" | "quic" => transfer.transport = Some(t.get_ref().clone()),
                other => bail!(
                    "{}: transport = {other:?}: use \"auto\", \"tcp\" or \"quic\"",
                    at(t.span())
                ),
            }
        }
        Ok(())
    }
}

/// `token_file`, `fingerprint`, `known_hosts`, `plaintext` on a node
/// started over ssh: refused (its node offers a token and key of its own
/// over the ssh channel, which are used).
pub(super) fn offered_over_ssh(
    token_file: &Option<PathBuf>,
    fingerprint: &Option<String>,
    known_hosts: &Option<PathBuf>,
    plaintext: bool,
) -> Result<()> {
    refuse_keys(
        &[
            ("token_file", token_file.is_some()),
            ("fingerprint", fingerprint.is_some()),
            ("known_hosts", known_hosts.is_some()),
            ("plaintext", plaintext),
        ],
        "for a haul:// node: a node started over ssh offers a token and key of its own over the \
         ssh channel, and those are used",
    )
}

/// `rsh`, `remote_haul`, `ssh_tunnel`, `ssh_install` on a `haul://` node:
/// refused (nothing is started over ssh for it).
pub(super) fn ssh_keys_only_over_ssh(
    rsh: &Option<String>,
    remote_haul: &Option<String>,
    tunnel: bool,
    install: bool,
) -> Result<()> {
    refuse_keys(
        &[
            ("rsh", rsh.is_some()),
            ("remote_haul", remote_haul.is_some()),
            ("ssh_tunnel", tunnel),
            ("ssh_install", install),
        ],
        "for a node started over ssh ([user@]host:DIR): a haul:// node is already running",
    )
}

/// The keys that say how a node is started over ssh, a site's or a source's.
pub(super) struct SshKeys<'a> {
    pub(super) rsh: &'a Option<String>,
    pub(super) remote_haul: &'a Option<String>,
    pub(super) tunnel: bool,
    pub(super) install: bool,
}

impl SshKeys<'_> {
    /// Onto `--rsh`, `--remote-haul`, `--ssh-tunnel`, `--ssh-install`.
    pub(super) fn apply(&self, transfer: &mut TransferArgs) {
        transfer.rsh.clone_from(self.rsh);
        if let Some(r) = self.remote_haul {
            transfer.remote_haul.clone_from(r);
        }
        transfer.ssh_tunnel = self.tunnel;
        transfer.ssh_install = self.install;
    }
}
