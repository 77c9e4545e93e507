//! In-memory connections that break on purpose: the driver-level twin of
//! `haul-netsim`'s lossy links. A [`Fault`] cuts or stalls one direction of
//! a [`memory_pair`](crate::memory_pair) after a number of bytes, so pools,
//! re-listing and relays can be tested in process against the failures a
//! real network gives them (a reset mid-file, a peer gone silent).
//!
//! The byte counts are of the framed stream, as a socket would carry it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncWrite, DuplexStream, WriteHalf};

use crate::conn::{pair_of, BoxWrite, Timeouts};

/// Which way a fault acts, seen from the end that dialed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Bytes the dialing end writes (a push's data, a pull's requests).
    Outbound,
    /// Bytes the dialing end reads (a pull's data, a node's answers).
    Inbound,
}

/// What happens once the byte budget is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breakage {
    /// The connection is reset: the writer gets an error, the reader the
    /// end of the stream.
    Cut,
    /// Nothing more moves and nothing says why, as a peer that lost power:
    /// only the waiting side's timeouts end it.
    Stall,
}

/// One fault on one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The direction that breaks.
    pub direction: Direction,
    /// Bytes that pass before it breaks.
    pub after: u64,
    /// How it breaks.
    pub breakage: Breakage,
}

impl Fault {
    /// Cuts `direction` after `after` bytes.
    pub fn cut(direction: Direction, after: u64) -> Self {
        Self {
            direction,
            after,
            breakage: Breakage::Cut,
        }
    }

    /// Stalls `direction` after `after` bytes.
    pub fn stall(direction: Direction, after: u64) -> Self {
        Self {
            direction,
            after,
            breakage: Breakage::Stall,
        }
    }
}

/// Two connected in-memory ends, the first the dialing one, with `fault`
/// applied to one direction.
pub fn faulty_memory_pair(
    timeouts: Timeouts,
    fault: Fault,
) -> (crate::Connection, crate::Connection) {
    let wrap = |w: WriteHalf<DuplexStream>, faulty: bool| -> BoxWrite {
        if faulty {
            Box::new(Faulty::new(w, fault))
        } else {
            Box::new(w)
        }
    };
    pair_of(
        timeouts,
        None,
        |w| wrap(w, fault.direction == Direction::Outbound),
        |w| wrap(w, fault.direction == Direction::Inbound),
    )
}

/// A writer that passes `left` bytes, then breaks.
struct Faulty<W> {
    inner: W,
    left: u64,
    breakage: Breakage,
    /// The cut was passed on to the peer (its read sees the end).
    shut: bool,
}

impl<W> Faulty<W> {
    fn new(inner: W, fault: Fault) -> Self {
        Self {
            inner,
            left: fault.after,
            breakage: fault.breakage,
            shut: false,
        }
    }
}

/// The budget shared by writes and the error a cut gives.
fn reset() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        "connection cut (test fault)",
    )
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Faulty<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        if me.left == 0 {
            return match me.breakage {
                // Never woken: only a timeout on the other side ends it.
                Breakage::Stall => Poll::Pending,
                Breakage::Cut => {
                    if !me.shut {
                        match Pin::new(&mut me.inner).poll_shutdown(cx) {
                            Poll::Pending => return Poll::Pending,
                            Poll::Ready(_) => me.shut = true,
                        }
                    }
                    Poll::Ready(Err(reset()))
                }
            };
        }
        let n = buf
            .len()
            .min(usize::try_from(me.left).unwrap_or(usize::MAX));
        match Pin::new(&mut me.inner).poll_write(cx, &buf[..n]) {
            Poll::Ready(Ok(wrote)) => {
                me.left -= wrote as u64;
                Poll::Ready(Ok(wrote))
            }
            other => other,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Faults for the connections one dialer makes, in order: the first
/// connection gets the first fault, and so on; the rest are clean.
#[derive(Debug, Default)]
pub struct FaultPlan {
    faults: std::sync::Mutex<std::collections::VecDeque<Option<Fault>>>,
}

impl FaultPlan {
    /// A plan giving `faults[i]` to the i-th connection (`None`: clean).
    pub fn new(faults: impl IntoIterator<Item = Option<Fault>>) -> Arc<Self> {
        Arc::new(Self {
            faults: std::sync::Mutex::new(faults.into_iter().collect()),
        })
    }

    /// The next connection's fault.
    pub fn next(&self) -> Option<Fault> {
        self.faults
            .lock()
            .map(|mut f| f.pop_front().flatten())
            .unwrap_or(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use haul_proto::Message;

    fn hello() -> Message {
        Message::Bye
    }

    #[tokio::test]
    async fn a_cut_ends_the_writer_with_an_error_and_the_reader_with_the_end() {
        let t = Timeouts::default();
        let ((_cr, mut cw), (mut sr, _sw)) =
            faulty_memory_pair(t, Fault::cut(Direction::Outbound, 0));
        assert!(cw.send(&hello()).await.is_err());
        assert!(sr.recv().await.is_err());
    }

    #[tokio::test]
    async fn bytes_within_the_budget_pass() {
        let t = Timeouts::default();
        let ((mut cr, _cw), (_sr, mut sw)) =
            faulty_memory_pair(t, Fault::cut(Direction::Inbound, 1 << 20));
        sw.send(&hello()).await.unwrap();
        assert_eq!(cr.recv().await.unwrap(), hello());
    }

    #[tokio::test]
    async fn a_stall_is_ended_by_the_timeout() {
        let t = Timeouts {
            idle: std::time::Duration::from_millis(200),
            ..Timeouts::default()
        };
        let ((_cr, mut cw), _server) = faulty_memory_pair(t, Fault::stall(Direction::Outbound, 0));
        let err = cw.send(&hello()).await.unwrap_err();
        assert!(
            matches!(err, crate::TransportError::Timeout { .. }),
            "{err}"
        );
    }

    #[test]
    fn a_plan_hands_out_faults_in_order_then_none() {
        let f = Fault::cut(Direction::Inbound, 5);
        let plan = FaultPlan::new([None, Some(f)]);
        assert_eq!(plan.next(), None);
        assert_eq!(plan.next(), Some(f));
        assert_eq!(plan.next(), None);
    }
}
