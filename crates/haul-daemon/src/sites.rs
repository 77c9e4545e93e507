//! The sites deliveries go to, and how one round reaches them: a site is
//! a node already running (`haul://HOST:PORT/DIR`) or a host where each
//! round starts one over ssh (`[user@]host:DIR`, as `haul push` to many
//! `host:path` destinations does: [`haul_node::ssh::fleet`]). A site whose
//! node cannot be started this round fails this round, with ssh's words;
//! the others go on without it.

use std::collections::HashMap;
use std::sync::Arc;

use haul_node::ssh::fleet::Fleet;
use haul_node::{ByAddress, ClientOptions, NodeAt, NodeUrl, OverNetwork, Reach};

/// Nodes started over ssh at once, at most (as `--ssh-parallel`).
const SSH_PARALLEL: usize = 32;

/// A node deliveries go to.
#[derive(Debug, Clone)]
pub struct SiteSpec {
    /// Its name (the catalog's key).
    pub name: String,
    /// The node and the directory deliveries go under.
    pub at: NodeAt,
    /// Its upload rate (bytes per second) when known: places it in the plan.
    pub rate: Option<f64>,
    /// How it is reached: its token, transport, security, ssh.
    pub client: ClientOptions,
    /// The site it is fed and reached through (`downstream` in that
    /// site's config): a fan-out plans it as that site's child, and every
    /// connection to it goes through that site's node
    /// ([`haul_node::jump`]).
    pub via: Option<Arc<SiteSpec>>,
}

impl SiteSpec {
    /// `rel` at this site, as messages and hooks name it.
    pub fn url_of(&self, rel: &str) -> String {
        format!("{}/{rel}", self.at.shown().trim_end_matches('/'))
    }
}

/// The sites of one round, reached.
pub(crate) struct Reached {
    /// Each site's place among [`Reached::urls`] (in the order asked), or
    /// why it could not be reached this round.
    pub placed: Vec<Result<usize, String>>,
    /// The fan-out's destinations.
    pub urls: Vec<NodeUrl>,
    /// Each destination with its own options (token, key, transport).
    pub reach: Arc<dyn Reach>,
    /// The ssh sessions the started nodes live by: held while the round's
    /// fan-out runs.
    _fleet: Option<Arc<Fleet>>,
}

impl Reached {
    /// Ends the round's nodes over ssh (their sessions close); what is
    /// left is where each site was placed.
    pub fn end(self) -> Vec<Result<usize, String>> {
        self.placed
    }
}

/// Reaches `sites`: a node over ssh started for each ssh site (all at
/// once), the others as they are.
pub(crate) async fn reach(sites: &[&SiteSpec]) -> Reached {
    let ssh: Vec<_> = sites
        .iter()
        .filter_map(|s| match &s.at {
            NodeAt::Ssh(at) => Some((at.clone(), s.client.clone())),
            NodeAt::Haul(_) => None,
        })
        .collect();
    let (fleet, started) = match ssh.is_empty() {
        true => (None, Vec::new()),
        false => {
            let (fleet, started) = Fleet::start_each(ssh, SSH_PARALLEL).await;
            (Some(fleet), started)
        }
    };
    let mut started = started.into_iter();
    let (mut placed, mut urls, mut options) = (Vec::new(), Vec::new(), HashMap::new());
    for site in sites {
        let url = match &site.at {
            NodeAt::Haul(url) => Ok((url.clone(), site.client.clone())),
            NodeAt::Ssh(_) => match (started.next(), &fleet) {
                (Some(Ok(url)), Some(fleet)) => match fleet.options_for(&url.addr, &site.client) {
                    Some(own) => Ok((url, own)),
                    None => Err("its node over ssh offered no address".to_owned()),
                },
                (Some(Err(e)), _) => Err(format!("its node could not be started over ssh: {e}")),
                _ => Err("its node over ssh was not started".to_owned()),
            },
        };
        placed.push(url.map(|(url, own)| {
            options.insert(url.addr.clone(), own);
            urls.push(url);
            urls.len() - 1
        }));
    }
    // A site reached through another: that one's address and options
    // too, whether or not it is a destination this round.
    let mut via = HashMap::new();
    for site in sites {
        let mut below = *site;
        while let Some(up) = &below.via {
            if let (NodeAt::Haul(b), NodeAt::Haul(u)) = (&below.at, &up.at) {
                via.insert(b.addr.clone(), u.addr.clone());
                options
                    .entry(u.addr.clone())
                    .or_insert_with(|| up.client.clone());
            }
            below = up;
        }
    }
    Reached {
        placed,
        urls,
        reach: Arc::new(ByAddress {
            options,
            via,
            // The fleet knows each ssh site's channel (`Reach::channel`).
            otherwise: match &fleet {
                Some(fleet) => fleet.clone(),
                None => Arc::new(OverNetwork),
            },
        }),
        _fleet: fleet,
    }
}
