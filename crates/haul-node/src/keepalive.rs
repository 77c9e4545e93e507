//! Long blocking work without tripping the peer's idle timeout.

use std::time::Duration;

use haul_proto::Message;
use haul_transport::FrameWriter;

use crate::NodeError;

/// Runs `work` on the blocking pool, sending [`Message::KeepAlive`] every
/// `every` until it finishes.
pub(crate) async fn while_keeping_alive<T: Send + 'static>(
    w: &mut FrameWriter,
    every: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, NodeError> {
    let mut handle = tokio::task::spawn_blocking(work);
    loop {
        tokio::select! {
            done = &mut handle => {
                return done.map_err(|e| NodeError::Internal(format!("worker stopped: {e}")));
            }
            _ = tokio::time::sleep(every) => w.send(&Message::KeepAlive).await?,
        }
    }
}

/// How often to send keepalives for an idle timeout.
pub(crate) fn interval(idle: Duration) -> Duration {
    (idle / 3).max(Duration::from_millis(100))
}

#[cfg(test)]
mod tests {
    use super::*;
    use haul_transport::{memory_pair, Timeouts};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slow_work_sends_keepalives_until_done() {
        let ((_ar, mut aw), (mut br, _bw)) = memory_pair(Timeouts::default());
        let result = while_keeping_alive(&mut aw, Duration::from_millis(40), || {
            std::thread::sleep(Duration::from_millis(300));
            7
        })
        .await
        .unwrap();
        assert_eq!(result, 7);
        aw.send(&Message::Bye).await.unwrap();
        let mut keepalives = 0;
        loop {
            match br.recv().await.unwrap() {
                Message::KeepAlive => keepalives += 1,
                Message::Bye => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(
            keepalives >= 4,
            "only {keepalives} keepalives in 300 ms at 40 ms"
        );
    }
}
