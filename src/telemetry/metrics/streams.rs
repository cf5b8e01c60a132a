//! Origin streams (`read/stream.rs`): the GETs that bring many blocks of a cold read at
//! once, how each ended, and the blocks they brought or that a reader fetched alone.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::ResultLabel;

/// How an origin stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// It brought every block it was opened for.
    Completed,
    /// Every read that needed it ended first; it kept the blocks it completed.
    ReadersLeft,
    /// The origin refused it (the version changed or is gone) or it broke off.
    Failed,
}

impl StreamEnd {
    pub const ALL: [Self; 3] = [Self::Completed, Self::ReadersLeft, Self::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::ReadersLeft => "readers_left",
            Self::Failed => "failed",
        }
    }
}

/// What becomes of a block an origin stream was to bring.
const BLOCK_OUTCOMES: [&str; 2] = ["streamed", "alone"];
/// What becomes of a block a stream brought that another member owns.
const HAND_OUTCOMES: [&str; 3] = ["handed", "failed", "skipped"];

#[derive(Default)]
pub struct StreamMetrics {
    opened: Counter,
    ended: Family<ResultLabel, Counter>,
    blocks: Family<ResultLabel, Counter>,
    handed: Family<ResultLabel, Counter>,
}

impl StreamMetrics {
    pub fn count_opened(&self) {
        self.opened.inc();
    }

    pub fn count_ended(&self, end: StreamEnd) {
        self.ended
            .get_or_create(&ResultLabel {
                result: end.as_str(),
            })
            .inc();
    }

    /// A stream brought a block.
    pub fn count_streamed(&self) {
        self.count_block(BLOCK_OUTCOMES[0]);
    }

    /// A reader fetched a block alone that a stream was to bring (too far ahead of it).
    pub fn count_alone(&self) {
        self.count_block(BLOCK_OUTCOMES[1]);
    }

    fn count_block(&self, result: &'static str) {
        self.blocks.get_or_create(&ResultLabel { result }).inc();
    }

    /// A block a stream brought for its owner (another member): handed to it (`true`), or
    /// the owner did not take it.
    pub fn count_handed(&self, taken: bool) {
        let result = HAND_OUTCOMES[if taken { 0 } else { 1 }];
        self.handed.get_or_create(&ResultLabel { result }).inc();
    }

    /// A block a stream brought for its owner was not handed to it: [`HAND_OUTCOMES`]'s
    /// limit of hands were under way (a slow owner asks for it when it needs it).
    pub fn count_hand_skipped(&self) {
        let result = HAND_OUTCOMES[2];
        self.handed.get_or_create(&ResultLabel { result }).inc();
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "portico_origin_streams",
            "Origin GETs opened for many blocks of a read at once (a cold read's uncached blocks, in a few streams)",
            self.opened.clone(),
        );
        registry.register(
            "portico_origin_streams_ended",
            "Origin streams ended, by result: completed (every block it was opened for), readers_left (every read that needed it ended first; the blocks it completed are kept), failed (the version changed or is gone, or the stream broke off)",
            self.ended.clone(),
        );
        registry.register(
            "portico_stream_blocks",
            "Blocks origin streams were opened for, by result: streamed (the stream brought it), alone (a reader needed it too far ahead of the stream and fetched it alone)",
            self.blocks.clone(),
        );
        registry.register(
            "portico_stream_handed_blocks",
            "Blocks an origin stream of this node brought that another member owns, by result: handed (the owner cached it), failed (the owner did not take it, or did not answer), skipped (8 hands to owners were under way already)",
            self.handed.clone(),
        );
    }

    pub(super) fn start_at_zero(&self) {
        for end in StreamEnd::ALL {
            drop(self.ended.get_or_create(&ResultLabel {
                result: end.as_str(),
            }));
        }
        for result in BLOCK_OUTCOMES {
            drop(self.blocks.get_or_create(&ResultLabel { result }));
        }
        for result in HAND_OUTCOMES {
            drop(self.handed.get_or_create(&ResultLabel { result }));
        }
    }
}
