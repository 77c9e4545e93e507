//! The far side of a `host:path` location, started by the client's ssh
//! (the wire is in `haul_node::ssh`): `haul serve --ssh`, a node for one
//! transfer on an ephemeral port with a fresh key and a one-time token, and
//! `haul serve --stdio`, one connection over the ssh channel itself. As a
//! forced command, `--restrict DIR` serves only what the client asked for
//! beneath DIR (`haul_node::ssh::restrict`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use haul_node::ssh::restrict::{Confined, Forced};
use haul_node::ssh::Offer;
use haul_node::Server;
use haul_transport::{Listener, QuicListener, ServerIdentity, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cli::ServeArgs;
use crate::serve::{serve_options, shutdown_signal};
use crate::{exit, UsageError};

/// What this far side serves, and how.
struct FarRequest {
    /// One connection on stdin/stdout rather than a port.
    stdio: bool,
    root: PathBuf,
    read_only: bool,
    /// Under `--restrict`: the directory confined beneath DIR.
    confined: Option<Confined>,
}

/// Runs `haul serve --ssh`, `--stdio`, or the forced command `--restrict`.
pub async fn run(args: &ServeArgs, partial_ttl: Option<Duration>) -> Result<u8> {
    let far = far_request(args)?;
    if !far.root.is_dir() {
        return Err(UsageError(format!(
            "{} is not a directory here: create it first",
            far.root.display()
        ))
        .into());
    }
    let idle = Duration::from_secs(args.timeout.max(1));
    let identity = if far.stdio {
        None
    } else {
        Some(ServerIdentity::generate().context("cannot make a key for this transfer")?)
    };
    let token = Offer::new_token().context("no random bytes for a token")?;
    let tokens = if far.stdio {
        Vec::new()
    } else {
        vec![token.clone()]
    };
    let mut opts = serve_options(args, &far.root, tokens, idle, partial_ttl)?;
    opts.read_only = far.read_only;
    // Started over ssh by the user it runs as, it keeps owners as that
    // user's own local copy would (rsync's far side); a forced command
    // (`--restrict`) only when its operator said `--keep-owners`.
    opts.keep_owners = args.keep_owners || far.confined.is_none();
    let timeouts = opts.timeouts;
    let server = Server::new(opts)
        .with_context(|| format!("cannot use {} as the node's root", far.root.display()))?;
    if let Some(confined) = &far.confined {
        if !confined.holds(&server) {
            return Err(UsageError(format!(
                "{} changed while it was opened: refused",
                far.root.display()
            ))
            .into());
        }
    }
    let mut stdout = tokio::io::stdout();
    let Some(identity) = identity else {
        // The protocol over the ssh channel: the banner, then one connection.
        stdout
            .write_all(haul_node::ssh::banner_line().as_bytes())
            .await?;
        stdout.flush().await?;
        let conn = haul_transport::stream_connection(tokio::io::stdin(), stdout, timeouts);
        server
            .serve_connection(conn, ssh_peer(), Transport::Tcp)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        return Ok(exit::OK);
    };
    let at = SocketAddr::new(arrived_at(), 0);
    let listener = Listener::bind(at, Some(&identity), None)
        .await
        .map_err(|e| UsageError(e.to_string()))?;
    let local = listener.local_addr()?;
    let quic = match QuicListener::bind(local, &identity, idle) {
        Ok(q) => Some(q),
        Err(e) => {
            tracing::warn!("no QUIC for this transfer (UDP {local}): {e}");
            None
        }
    };
    let offer = Offer {
        addr: local,
        fingerprint: identity.fingerprint(),
        token,
    };
    stdout.write_all(offer.line().as_bytes()).await?;
    stdout.flush().await?;
    let watched = server.clone();
    let done = async move {
        tokio::select! {
            () = channel_closed() => tracing::debug!("the ssh channel closed"),
            () = idle_out(&watched, idle) => tracing::info!("no connection for {}s: stopping", idle.as_secs()),
            () = shutdown_signal() => tracing::info!("signal received: stopping"),
        }
    };
    server
        .serve(listener, quic, done, std::future::pending())
        .await;
    Ok(exit::OK)
}

/// What to serve: the flags as given, or under `--restrict` what the ssh
/// client asked for (`SSH_ORIGINAL_COMMAND`), confined beneath DIR.
fn far_request(args: &ServeArgs) -> Result<FarRequest> {
    let Some(dir) = &args.restrict else {
        let Some(root) = args.root.clone() else {
            return Err(UsageError("haul serve needs --root DIR".into()).into());
        };
        return Ok(FarRequest {
            stdio: args.stdio,
            root,
            read_only: args.read_only,
            confined: None,
        });
    };
    let forced = match std::env::var("SSH_ORIGINAL_COMMAND") {
        Ok(cmd) => Forced::parse(&cmd).map_err(UsageError)?,
        Err(_) if args.stdio || args.ssh => Forced {
            stdio: args.stdio,
            root: args
                .root
                .as_ref()
                .map(|r| r.to_string_lossy().into_owned())
                .unwrap_or_default(),
            read_only: false,
        },
        Err(_) => return Err(UsageError(format!(
            "--restrict is for a forced command in authorized_keys (command=\"haul serve --ssh --restrict {}\"): this session asked for no haul transfer",
            dir.display()
        ))
        .into()),
    };
    let confined = Confined::beneath(dir, &forced.root).map_err(UsageError)?;
    Ok(FarRequest {
        stdio: forced.stdio,
        root: confined.path.clone(),
        read_only: args.read_only || forced.read_only,
        confined: Some(confined),
    })
}

/// Resolves when stdin — the ssh channel — reaches its end: the client is
/// done, or it or its ssh went away.
async fn channel_closed() {
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 512];
    while let Ok(n) = stdin.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}

/// Resolves once no connection has been open for `idle`.
async fn idle_out(server: &Server, idle: Duration) {
    let mut quiet_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if server.connections() > 0 {
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= idle {
            return;
        }
    }
}

/// The address the ssh connection arrived at (`SSH_CONNECTION`'s third
/// word): the one the client reached this host by. 127.0.0.1 without it.
fn arrived_at() -> IpAddr {
    std::env::var("SSH_CONNECTION")
        .ok()
        .and_then(|v| v.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// Who is at the other end of the ssh channel (`SSH_CLIENT`: address and
/// ports), for the transfer log; unknown as 0.0.0.0:0.
fn ssh_peer() -> SocketAddr {
    let from_env = std::env::var("SSH_CLIENT").ok().and_then(|v| {
        let mut words = v.split_whitespace();
        let ip: IpAddr = words.next()?.parse().ok()?;
        let port: u16 = words.next()?.parse().ok()?;
        Some(SocketAddr::new(ip, port))
    });
    from_env.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
}
