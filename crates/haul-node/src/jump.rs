//! Reaching a node through another (`Request::Jump`, protocol version 21),
//! both sides in one module: a daemon's site that only another site can
//! reach (a downstream of a relay in a distribution tree) is dialled
//! through that site, as ssh's `ProxyJump` reaches a host behind a bastion.
//!
//! - The client ([`Jumped`], a [`Dial`]) opens `Jump{to}` on a connection
//!   to the node in between — its token, its pinned key, as for any
//!   request — and runs its own TLS session with the node at `to` inside
//!   it (`haul_transport::connect_through`): `to`'s key is pinned as if it
//!   were dialled directly, `to`'s token travels inside that session, and
//!   the node in between forwards ciphertext it cannot read (with TLS: a
//!   plaintext node's session is as readable there as on any network).
//! - The node in between ([`onward`]) passes a connection on only to an
//!   address its operator named (`haul serve --jump-to HOST:PORT`), over
//!   TCP, within the connect timeout, and says why when it does not.
//! - Both sides move the bytes with one [`pipe`]: `Piped` messages one
//!   way, a byte stream the other, `Bye` for a direction that ended, every
//!   wait bounded by the idle limit.
//!
//! Data that moves in a fan-out does not come this way when it can be
//! helped: a node reached through another is planned as that node's
//! child, and the relay sends to it directly (`haul_plan::Plan::build_fixed`).
//! What comes this way is the client's own: admission, listings, prunes,
//! links — and the data when the node in between is not in the transfer
//! (it owed nothing this round) or was lost from it: the node reached is
//! then the client's leaf, never another relay's child (`Plan::pinned`).
//!
//! Written here rather than taken from a crate: the pipe is ~40 lines over
//! the message transport every connection already has.

use std::sync::Arc;
use std::time::Duration;

use haul_proto::{ErrorCode, Message, Request, MAX_PIPED};
use haul_transport::{connect_through, Connection, Security, Timeouts};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::dial::{Dial, Dialer, Dialing, Reached};
use crate::NodeError;

/// A node reached through another ([`Dial`]): `via` reaches the node in
/// between, which passes the connection on to `to`.
pub struct Jumped {
    /// The node in between.
    pub via: Dialer,
    /// The node reached, `host:port` as the node in between dials it.
    pub to: String,
    /// How `to`'s key is checked (TLS with its pin) or not (plaintext).
    pub security: Security,
    /// Handshake and idle limits.
    pub timeouts: Timeouts,
    /// The node reached's own tuning: its `--max-rate` (a site's
    /// `max_rate`) paces what goes through the node in between.
    pub tuning: haul_transport::Tuning,
}

impl Dial for Jumped {
    fn connect(&self) -> Dialing<'_> {
        Box::pin(async move {
            let through = self
                .via
                .open(Request::Jump {
                    to: self.to.clone(),
                })
                .await
                .map_err(|e| match e {
                    NodeError::Refused { code, message } => NodeError::Refused {
                        code,
                        message: format!(
                            "{}, the way to {}, says: {message}",
                            self.via.name(),
                            self.to
                        ),
                    },
                    other => other,
                })?;
            let (near, far) = tokio::io::duplex(4 * MAX_PIPED);
            let idle = self.timeouts.idle;
            let to = self.to.clone();
            tokio::spawn(async move {
                if let Err(e) = pipe(through, far, idle).await {
                    tracing::debug!("the connection to {to} passed on: {e}");
                }
            });
            let (conn, key) =
                connect_through(near, &self.to, &self.security, self.timeouts, &self.tuning)
                    .await?;
            let over = match key {
                Some(_) => "TLS 1.3, passed on by another node",
                None => "plaintext, passed on by another node",
            };
            Ok(Reached {
                answer_first: key.is_none(),
                conn,
                key,
                over,
                token: None,
            })
        })
    }

    fn name(&self) -> &str {
        &self.to
    }
}

impl Jumped {
    /// This way as a [`Dial`].
    pub fn into_dial(self) -> Arc<dyn Dial> {
        Arc::new(self)
    }
}

/// The node's side of `Jump{to}`, its token already checked: the TCP
/// connection to `to`, dialled within the connect timeout — or why not:
/// `allowed` (`--jump-to`) does not name it, or it cannot be reached. The
/// server then answers `Welcome` and runs the [`pipe`].
pub(crate) async fn onward(
    to: &str,
    allowed: &[String],
    timeouts: Timeouts,
) -> Result<Box<dyn haul_transport::ByteStream>, (ErrorCode, String)> {
    if !allowed.iter().any(|a| a == to) {
        return Err((
            ErrorCode::Unauthorized,
            format!(
                "this node passes no connection on to {to}: its operator allows that with \
                 `haul serve --jump-to {to}`"
            ),
        ));
    }
    match haul_transport::connect_bytes(to, timeouts).await {
        Ok(stream) => {
            tracing::info!("passing a connection on to {to}");
            Ok(stream)
        }
        Err(e) => Err((ErrorCode::Io, format!("it cannot reach {to}: {e}"))),
    }
}

/// Moves bytes between `conn` (`Piped` messages) and `stream` both ways
/// until each way ended (`Bye` one way, end of stream the other), or
/// either failed. The session inside may leave one way silent for long
/// (a sender waiting on nothing): while the stream is quiet this side
/// says `KeepAlive` every third of `idle`, so `conn`'s own idle limit
/// counts only a peer that is gone; once the peer's way ended, the
/// stream has `idle` to end too, and a write nobody reads fails after it.
pub(crate) async fn pipe<S>(conn: Connection, stream: S, idle: Duration) -> Result<(), NodeError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (mut r, mut w) = conn;
    let (mut from_stream, mut to_stream) = tokio::io::split(stream);
    let peer_ended = std::sync::atomic::AtomicBool::new(false);
    let inbound = async {
        loop {
            match r.recv().await? {
                Message::Piped { data } => within(idle, to_stream.write_all(&data)).await?,
                Message::Bye => {
                    peer_ended.store(true, std::sync::atomic::Ordering::Relaxed);
                    // Its end of the stream may be gone already: nothing
                    // more to say to it either way.
                    let _ = within(idle, to_stream.shutdown()).await;
                    return Ok::<_, NodeError>(());
                }
                Message::KeepAlive => {}
                other => {
                    return Err(NodeError::Protocol(format!(
                        "expected Piped on a connection passed on, got {other:?}"
                    )))
                }
            }
        }
    };
    let outbound = async {
        let mut buf = vec![0u8; MAX_PIPED];
        let beat = (idle / 3).max(Duration::from_millis(100));
        loop {
            let n = match peer_ended.load(std::sync::atomic::Ordering::Relaxed) {
                true => within(idle, from_stream.read(&mut buf)).await?,
                false => match tokio::time::timeout(beat, from_stream.read(&mut buf)).await {
                    Ok(read) => read.map_err(|e| NodeError::Transport(e.into()))?,
                    Err(_) => {
                        w.send(&Message::KeepAlive).await?;
                        continue;
                    }
                },
            };
            if n == 0 {
                w.send(&Message::Bye).await?;
                return Ok::<_, NodeError>(());
            }
            let data = buf.get(..n).unwrap_or_default().to_vec();
            w.send(&Message::Piped { data }).await?;
        }
    };
    tokio::try_join!(inbound, outbound)?;
    Ok(())
}

/// `io` within `idle`, a timeout as the transport's own.
async fn within<T>(
    idle: Duration,
    io: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, NodeError> {
    match tokio::time::timeout(idle, io).await {
        Ok(r) => r.map_err(|e| NodeError::Transport(haul_transport::TransportError::Io(e))),
        Err(_) => Err(NodeError::Transport(
            haul_transport::TransportError::Timeout {
                what: "a connection passed on",
                secs: idle.as_secs(),
            },
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use haul_transport::memory_pair;

    #[tokio::test]
    async fn a_pipe_carries_bytes_both_ways_and_ends_when_both_ways_ended() {
        let timeouts = Timeouts::default();
        let (mut near, far) = memory_pair(timeouts);
        let (mut stream, piped) = tokio::io::duplex(1024);
        let piping = tokio::spawn(pipe(far, piped, Duration::from_secs(5)));
        // Messages in become bytes out, split as they came, in order.
        let big: Vec<u8> = (0..MAX_PIPED + 10).map(|i| (i % 251) as u8).collect();
        near.1
            .send(&Message::Piped {
                data: big[..MAX_PIPED].to_vec(),
            })
            .await
            .unwrap();
        near.1
            .send(&Message::Piped {
                data: big[MAX_PIPED..].to_vec(),
            })
            .await
            .unwrap();
        let mut got = vec![0u8; big.len()];
        stream.read_exact(&mut got).await.unwrap();
        assert_eq!(got, big);
        // Bytes in become messages out; the end of the stream is `Bye`.
        stream.write_all(b"hello").await.unwrap();
        stream.shutdown().await.unwrap();
        let mut back = Vec::new();
        loop {
            match near.0.recv().await.unwrap() {
                Message::Piped { data } => back.extend(data),
                Message::Bye => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(back, b"hello");
        // Our `Bye` ends the other way: the pipe is done.
        near.1.send(&Message::Bye).await.unwrap();
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        piping.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_pipe_refuses_anything_but_bytes() {
        let (mut near, far) = memory_pair(Timeouts::default());
        let (_stream, piped) = tokio::io::duplex(1024);
        let piping = tokio::spawn(pipe(far, piped, Duration::from_secs(5)));
        near.1
            .send(&Message::Hello {
                version: 1,
                token: String::new(),
                request: Request::Jump { to: "x:1".into() },
            })
            .await
            .unwrap();
        let e = piping.await.unwrap().unwrap_err();
        assert!(e.to_string().contains("expected Piped"), "{e}");
    }

    #[tokio::test]
    async fn only_the_nodes_its_operator_named_are_reached() {
        let Err(refused) =
            onward("127.0.0.1:9", &["127.0.0.1:10".into()], Timeouts::default()).await
        else {
            panic!("reached an address not allowed");
        };
        assert_eq!(refused.0, ErrorCode::Unauthorized);
        assert!(refused.1.contains("--jump-to 127.0.0.1:9"), "{}", refused.1);
        // Named, but nothing listens there: said, not hung.
        let port = {
            let any = "127.0.0.1:0".parse().unwrap();
            let l = haul_transport::Listener::bind(any, None, None)
                .await
                .unwrap();
            l.local_addr().unwrap().port()
        };
        let to = format!("127.0.0.1:{port}");
        let Err(unreachable) = onward(&to, std::slice::from_ref(&to), Timeouts::default()).await
        else {
            panic!("reached a port nothing listens on");
        };
        assert_eq!(unreachable.0, ErrorCode::Io);
        assert!(unreachable.1.contains("cannot reach"), "{}", unreachable.1);
    }

    #[tokio::test]
    async fn a_quiet_stream_is_kept_alive_and_the_pipe_waits_for_it() {
        let idle = Duration::from_millis(300);
        let (mut near, far) = memory_pair(Timeouts {
            idle,
            ..Timeouts::default()
        });
        let (mut stream, piped) = tokio::io::duplex(1024);
        let piping = tokio::spawn(pipe(far, piped, idle));
        // Ten idle limits of silence from the stream: keepalives, no end
        // (this side answers in kind, as the pipe at its end does).
        let mut beats = 0;
        let until = tokio::time::Instant::now() + idle * 10;
        while tokio::time::Instant::now() < until {
            match tokio::time::timeout(idle, near.0.recv()).await {
                Ok(Ok(Message::KeepAlive)) => beats += 1,
                other => panic!("{other:?}"),
            }
            near.1.send(&Message::KeepAlive).await.unwrap();
        }
        assert!(beats >= 20, "{beats}");
        assert!(!piping.is_finished());
        stream.write_all(b"late").await.unwrap();
        let mut got = Vec::new();
        while got.len() < 4 {
            match near.0.recv().await.unwrap() {
                Message::Piped { data } => got.extend(data),
                Message::KeepAlive => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(got, b"late");
        drop(stream);
        near.1.send(&Message::Bye).await.unwrap();
        piping.await.unwrap().unwrap();
    }
}
