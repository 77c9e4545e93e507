//! `--bwlimit` for remote pulls: the transport's [`RateLimit`] (the one
//! pushes and node pulls use, paced in slices) as the remotes' read pace.

use std::sync::Arc;

use haul_remote::ReadPace;
use haul_transport::RateLimit;

/// One cap across every session of a pull.
struct PacedReads(Arc<RateLimit>);

#[async_trait::async_trait]
impl ReadPace for PacedReads {
    async fn take(&self, n: usize) {
        // In the limiter's slices, so one large piece is spread too.
        let mut left = n;
        while left > 0 {
            let step = left.min(haul_transport::pace::SLICE);
            self.0.take(step).await;
            left -= step;
        }
    }
}

/// The read pace of a pull capped at `limit`.
pub fn read_pace(limit: Arc<RateLimit>) -> Arc<dyn ReadPace> {
    Arc::new(PacedReads(limit))
}
