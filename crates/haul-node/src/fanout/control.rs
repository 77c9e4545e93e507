//! One control connection of a fan-out, as a task: the coordinator's
//! messages out, keepalives, the node's reports and evidence in as
//! [`News`], its silence measured ([`Liveness`]).

use std::time::{Duration, Instant};

use haul_plan::{Liveness, Verdict};
use haul_proto::Message;
use haul_transport::{MessageReader, MessageWriter};
use tokio::sync::mpsc;

use super::{LastHeard, News};
use crate::NodeError;

/// Runs one control connection: sends the coordinator's messages, sends
/// keepalives, passes on the node's `Report`; its end is the node's loss,
/// and its silence past [`Liveness::limit`] makes it a suspect (news that
/// it spoke again follows if it does).
pub(super) async fn control(
    i: usize,
    (mut r, mut w): (Box<dyn MessageReader>, Box<dyn MessageWriter>),
    mut commands: mpsc::UnboundedReceiver<Message>,
    news: mpsc::UnboundedSender<News>,
    heard: LastHeard,
    idle: Duration,
    rtt: Duration,
) {
    let mut live = Liveness::new(rtt, Instant::now());
    let keepalive = idle / 3;
    // A `--timeout` too long to add to the clock sends none.
    let after = |d: Duration| {
        let now = tokio::time::Instant::now();
        now.checked_add(d)
            .unwrap_or(now + Duration::from_secs(86400 * 365))
    };
    let mut next_keepalive = after(keepalive);
    let result: Result<(), NodeError> = async {
        loop {
            let deadline = live.deadline();
            let silence = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // A message that waited while this task did counts before
                // the silence it ends.
                biased;
                msg = r.recv() => {
                    let msg = msg?;
                    let now = Instant::now();
                    if let Some(h) = heard.lock().ok().as_mut().and_then(|h| h.get_mut(i)) {
                        h.message(now);
                    }
                    if live.heard(now) == Verdict::Back {
                        let _ = news.send(News::Back(i));
                    }
                    match msg {
                        Message::KeepAlive => {}
                        Message::Progress { bytes, complete, .. } => { let _ = news.send(News::Progress(i, bytes, complete)); }
                        m @ Message::Report { .. } => { let _ = news.send(News::Reported(i, m)); }
                        Message::Unsealed { edge, entries, chunks } => { let _ = news.send(News::Unsealed(i, edge, entries, chunks)); }
                        Message::Quiet { edge, millis } => { let _ = news.send(News::Quiet(i, edge, millis)); }
                        other => return Err(NodeError::Protocol(format!("unexpected {other:?} on a control connection"))),
                    }
                }
                cmd = commands.recv() => match cmd {
                    Some(Message::Bye) | None => {
                        let _ = w.send(&Message::Bye).await;
                        return Ok(());
                    }
                    Some(m) => w.send(&m).await?,
                },
                () = silence => {
                    if let Verdict::Suspect(silent) = live.check(Instant::now()) {
                        let _ = news.send(News::Silent(i, silent));
                    }
                }
                () = tokio::time::sleep_until(next_keepalive) => {
                    next_keepalive = after(keepalive);
                    w.send(&Message::KeepAlive).await?;
                }
            }
        }
    }
    .await;
    if let Err(e) = result {
        // Killed (its kernel reset the connection) or refused something.
        let why = format!("its control connection ended: {e}");
        let _ = news.send(News::Lost(i, why));
    }
}
