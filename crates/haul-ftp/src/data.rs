//! Passive-mode data connections: EPSV (RFC 2428), falling back to PASV.
//!
//! The data connection always goes to the control connection's peer IP; only
//! the port of the reply is used. Like curl's default (and lftp's
//! `fix-pasv-address` for the usual NAT case), this makes servers that answer
//! `0.0.0.0`, a private or a loopback address behind NAT work, and keeps a
//! hostile server from aiming the data connection at another host.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use haul_remote::{within, RemoteError};
use tokio::net::TcpStream;

use crate::control::{Control, Reply};
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

/// `229 Entering Extended Passive Mode (|||6446|)` → 6446.
fn parse_epsv(r: &Reply) -> Result<u16, RemoteError> {
    let text = r.lines.first().map(String::as_str).unwrap_or("");
    let bad = || RemoteError::Protocol(format!("cannot parse the EPSV reply {:?}", r.message()));
    let inner = text
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(inner, _)| inner)
        .ok_or_else(bad)?;
    let delim = inner.chars().next().ok_or_else(bad)?;
    let parts: Vec<&str> = inner.split(delim).collect();
    if parts.len() != 5 {
        return Err(bad());
    }
    match parts[3].parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(bad()),
    }
}

/// `227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)` → address and port.
fn parse_pasv(r: &Reply) -> Result<(Ipv4Addr, u16), RemoteError> {
    let text = r.lines.first().map(String::as_str).unwrap_or("");
    let bad = || RemoteError::Protocol(format!("cannot parse the PASV reply {:?}", r.message()));
    for piece in text.split(|c: char| !(c.is_ascii_digit() || c == ',')) {
        let nums: Vec<&str> = piece.split(',').collect();
        if nums.len() != 6 {
            continue;
        }
        let mut v = [0u8; 6];
        for (slot, n) in v.iter_mut().zip(&nums) {
            *slot = n.parse().map_err(|_| bad())?;
        }
        let port = u16::from(v[4]) << 8 | u16::from(v[5]);
        if port == 0 {
            return Err(bad());
        }
        return Ok((Ipv4Addr::new(v[0], v[1], v[2], v[3]), port));
    }
    Err(bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(code: u16, text: &str) -> Reply {
        Reply {
            code,
            lines: vec![text.to_string()],
        }
    }

    #[test]
    fn passive_replies() {
        assert_eq!(
            parse_epsv(&reply(229, "Entering Extended Passive Mode (|||6446|)")).unwrap(),
            6446
        );
        assert_eq!(parse_epsv(&reply(229, "ok (!!!21!)")).unwrap(), 21);
        assert!(parse_epsv(&reply(229, "Entering Extended Passive Mode")).is_err());
        assert!(parse_epsv(&reply(229, "(|||0|)")).is_err());
        assert_eq!(
            parse_pasv(&reply(227, "Entering Passive Mode (192,168,1,2,195,80).")).unwrap(),
            (Ipv4Addr::new(192, 168, 1, 2), 195 * 256 + 80)
        );
        assert_eq!(parse_pasv(&reply(227, "=127,0,0,1,4,1")).unwrap().1, 1025);
        assert!(parse_pasv(&reply(227, "(300,0,0,1,4,1)")).is_err());
        assert!(parse_pasv(&reply(227, "Entering Passive Mode")).is_err());
    }
}
