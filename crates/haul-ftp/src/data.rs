//! Passive-mode data connections: EPSV (RFC 2428), falling back to PASV.
//!
//! The data connection always goes to the control connection's peer IP; only
//! the port of the reply is used. Like curl's default (and lftp's
//! `fix-pasv-address` for the usual NAT case), this makes servers that answer
//! `0.0.0.0`, a private or a loopback address behind NAT work, and keeps a
//! hostile server from aiming the data connection at another host.

use std::net::{IpAddr, SocketAddr};

use haul_remote::{within, RemoteError};
use tokio::net::TcpStream;

use crate::control::Control;
use crate::reply::{parse_epsv, parse_pasv};
use crate::session::unexpected;

/// Opens a passive data connection. `epsv` is cleared when the server
/// rejects EPSV, so later transfers go straight to PASV.
pub(crate) async fn open_passive(
    ctl: &mut Control,
    epsv: &mut bool,
) -> Result<TcpStream, RemoteError> {
    let mut port = None;
    if *epsv {
        let r = ctl.cmd("EPSV").await?;
        match r.code {
            229 => port = Some(parse_epsv(&r)?),
            500..=504 | 522 => *epsv = false,
            _ => return Err(unexpected("EPSV", &r)),
        }
    }
    let peer = ctl.peer().ip();
    let port = match port {
        Some(p) => p,
        None => {
            let r = ctl.cmd("PASV").await?;
            if r.code != 227 {
                return Err(unexpected("PASV", &r));
            }
            let (ip, port) = parse_pasv(&r)?;
            if IpAddr::V4(ip) != peer {
                tracing::debug!(%ip, %peer, "PASV named another address; using the control connection's");
            }
            port
        }
    };
    let addr = SocketAddr::new(peer, port);
    let tcp = within(ctl.timeout(), "opening the data connection", async {
        TcpStream::connect(addr).await.map_err(|e| {
            RemoteError::Connection(format!(
                "cannot open the data connection to {addr}: {e} (a firewall may block the server's passive ports)"
            ))
        })
    })
    .await?;
    let _ = tcp.set_nodelay(true);
    Ok(tcp)
}
