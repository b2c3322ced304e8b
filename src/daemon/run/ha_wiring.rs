//! What the election reports, shown in the daemon's status and metrics.

use std::sync::Arc;

use crate::daemon::views::board::Board;
use crate::daemon::views::metrics::{Metrics, ShardMoveLabels};
use crate::ha::{HaStatus, Observer};

pub struct Reports {
    pub board: Arc<Board>,
    pub metrics: Arc<Metrics>,
}

impl Observer for Reports {
    fn status(&self, status: HaStatus) {
        self.board.update(|d| d.daemon.ha = Some(status));
    }

    fn holding(&self, held: usize) {
        self.metrics.shards_held.set(held as i64);
        self.metrics.leader.set(i64::from(held > 0));
    }

    fn took_shard(&self, after: jiff::SignedDuration) {
        self.metrics
            .shard_handover_seconds
            .observe(after.as_secs_f64().max(0.0));
        self.moved("take");
    }

    fn released_shard(&self) {
        self.moved("release");
    }
}

impl Reports {
    fn moved(&self, dir: &str) {
        self.metrics
            .shard_rebalances
            .get_or_create(&ShardMoveLabels { dir: dir.into() })
            .inc();
    }
}
