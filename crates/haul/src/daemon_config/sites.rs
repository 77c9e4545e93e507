//! `[[site]]` tables: each checked into a [`SitePlan`], and `downstream`
//! lists into the sites each one is fed and reached through.

use anyhow::{bail, Context, Result};
use toml::Spanned;

use super::node_keys::{offered_over_ssh, ssh_keys_only_over_ssh, NodeKeys, SshKeys};
use super::{SiteConfig, SitePlan};
use crate::cli::{flag_defaults, TransferArgs};
use crate::location::NodeAt;

pub(super) fn site_plan(
    s: &SiteConfig,
    at: &dyn Fn(std::ops::Range<usize>) -> String,
) -> Result<SitePlan> {
    if s.name.is_empty() || s.name.chars().any(char::is_control) {
        bail!("name must be a non-empty plain name");
    }
    let bad = |e: String| {
        anyhow::anyhow!(
            "{}: url = {:?}: {e} (use haul://HOST:PORT/DIR or [user@]host:DIR)",
            at(s.url.span()),
            s.url.get_ref()
        )
    };
    let site_at = match crate::location::parse_node_at(s.url.get_ref()) {
        Some(parsed) => parsed.map_err(|e| bad(format!("{e:#}")))?,
        None => return Err(bad("not a haul node".into())),
    };
    let site_at = match site_at {
        NodeAt::Haul(url) => {
            ssh_keys_only_over_ssh(&s.rsh, &s.remote_haul, s.ssh_tunnel, s.ssh_install)?;
            haul_proto::validate_rel_path(url.path.trim_matches('/')).map_err(|e| {
                anyhow::anyhow!(
                    "{}: url: the directory {:?}: {e}",
                    at(s.url.span()),
                    url.path
                )
            })?;
            NodeAt::Haul(url)
        }
        // The node started there serves the directory itself: nothing
        // outside it can be named.
        ssh @ NodeAt::Ssh(_) => {
            offered_over_ssh(&s.token_file, &s.fingerprint, &s.known_hosts, s.plaintext)?;
            ssh.naming_contents()
        }
    };
    let rate = match &s.rate {
        None => None,
        Some(r) => Some(
            crate::config::parse_rate(r.get_ref())
                .with_context(|| format!("{}: rate", at(r.span())))?,
        ),
    };
    let defaults = || anyhow::anyhow!("the flags' defaults do not parse (a bug)");
    let mut transfer: TransferArgs = flag_defaults().map_err(|_| defaults())?;
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
    transfer.timeout = s.timeout.unwrap_or(transfer.timeout);
    transfer.max_rate.clone_from(&s.max_rate);
    // Read now (the token file too), not at the first delivery.
    let client = crate::config::client_options(&transfer)?;
    Ok(SitePlan {
        name: s.name.clone(),
        at: site_at,
        rate,
        transfer,
        client,
        via: None,
    })
}

/// Most sites a connection is passed on through to reach one: the
/// dialer's own limit.
const MAX_SITE_DEPTH: usize = haul_node::MAX_JUMPS;

/// Each site's `downstream`, checked, noted as the `via` of the sites it
/// names: a site named there is one (the daemon reaches it only through
/// that one), a `haul://` node (the site above passes connections on to
/// its port) below a `haul://` node (one that runs `haul serve
/// --jump-to`), under one site at most, and the sites form no loop.
pub(super) fn downstream_sites(
    given: &[Spanned<SiteConfig>],
    sites: &mut [SitePlan],
    at: &dyn Fn(std::ops::Range<usize>) -> String,
) -> Result<()> {
    for site in given {
        let (line, up) = (at(site.span()), site.get_ref());
        for name in &up.downstream {
            let known: Vec<&str> = sites.iter().map(|s| s.name.as_str()).collect();
            let Some(i) = sites.iter().position(|s| &s.name == name) else {
                bail!(
                    "{line}: [[site]] {:?}: downstream names {name:?}, and no [[site]] has that name (the sites are {})",
                    up.name,
                    known.join(", ")
                );
            };
            if name == &up.name {
                bail!("{line}: [[site]] {name:?} names itself downstream");
            }
            if let Some(other) = &sites[i].via {
                if other == &up.name {
                    bail!(
                        "{line}: [[site]] {:?} names {name:?} downstream twice",
                        up.name
                    );
                }
                bail!(
                    "{line}: [[site]] {name:?} is downstream of both {other:?} and {:?}: a site is fed through one site",
                    up.name
                );
            }
            if !matches!(sites[i].at, NodeAt::Haul(_)) {
                bail!(
                    "{line}: [[site]] {name:?} is downstream of {:?}, and is reached over ssh: a site reached through another must be a running node (haul://HOST:PORT/DIR)",
                    up.name
                );
            }
            let above = sites.iter().find(|s| s.name == up.name);
            if !above.is_some_and(|s| matches!(s.at, NodeAt::Haul(_))) {
                bail!(
                    "{line}: [[site]] {:?} has downstream sites, and is reached over ssh: the site they are reached through must be a running node (haul://HOST:PORT/DIR) whose `haul serve` passes connections on to them (--jump-to)",
                    up.name
                );
            }
            sites[i].via = Some(up.name.clone());
        }
    }
    for s in sites.iter() {
        let mut at_site = s;
        for depth in 0..sites.len() {
            let Some(up) = &at_site.via else { break };
            if up == &s.name {
                bail!(
                    "[[site]] {:?}: the sites' downstream lists form a loop through it",
                    s.name
                );
            }
            if depth >= MAX_SITE_DEPTH {
                bail!(
                    "[[site]] {:?} is more than {MAX_SITE_DEPTH} sites below the daemon: a connection is passed on {MAX_SITE_DEPTH} times at most",
                    s.name
                );
            }
            match sites.iter().find(|x| &x.name == up) {
                Some(next) => at_site = next,
                None => break,
            }
        }
    }
    Ok(())
}

/// `deliver` with every site downstream of those it names, after them
/// (each once): a file delivered to a site goes on to the sites below it.
pub(super) fn with_downstream(deliver: &[String], sites: &[SitePlan]) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    let mut queue: std::collections::VecDeque<&String> = deliver.iter().collect();
    while let Some(name) = queue.pop_front() {
        if all.contains(name) {
            continue;
        }
        all.push(name.clone());
        queue.extend(
            sites
                .iter()
                .filter(|s| s.via.as_ref() == Some(name))
                .map(|s| &s.name),
        );
    }
    all
}
