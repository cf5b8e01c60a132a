//! The schedules the simulation once failed, shrunk and kept: each runs every time.

use super::*;

/// Schedules generated runs once shrunk to, kept so they run every time: two stalls of
/// one block in a row; a discovery started after a write while a fetch from before it is
/// under way; two members fetching for themselves after the origin failed their owner;
/// and a read that joined a discovery stalled for longer than the TTL, whose answer was
/// older than the TTL allows (a read now joins only a discovery no older than its TTLs).
pub(super) fn regressions() -> Vec<(Shape, Vec<Op>)> {
    let whole = |member, key| Op::Read {
        member,
        key,
        range: None,
    };
    vec![
        (
            Shape::Memory,
            vec![
                Op::Stall { key: 1, block: 0 },
                Op::Stall { key: 1, block: 0 },
                whole(0, 1),
                Op::OutOfBand { key: 1, size: 1 },
            ],
        ),
        (
            Shape::Memory,
            vec![
                whole(0, 0),
                Op::Elapse { ms: 60_004 },
                whole(0, 0),
                Op::Write {
                    key: 0,
                    size: BLOCK,
                },
                Op::OriginUp,
                whole(0, 0),
            ],
        ),
        (
            Shape::Memory,
            vec![
                Op::OutOfBand {
                    key: 0,
                    size: 4 * BLOCK + 1,
                },
                Op::Stall { key: 0, block: 1 },
                Op::Read {
                    member: 0,
                    key: 0,
                    range: Some((2 * BLOCK, 1)),
                },
                Op::OutOfBand {
                    key: 0,
                    size: 2 * BLOCK,
                },
                whole(0, 0),
            ],
        ),
        (
            Shape::Memory,
            vec![
                Op::Stall { key: 0, block: 0 },
                Op::Write { key: 0, size: 1 },
                whole(0, 0),
                Op::OutOfBand { key: 0, size: 1 },
                Op::Elapse { ms: 21_578 },
                Op::Elapse { ms: 38_424 },
                whole(0, 0),
            ],
        ),
        (
            Shape::Pair,
            vec![
                whole(1, 1),
                Op::OriginUp,
                whole(0, 0),
                whole(1, 0),
                Op::OriginDown,
                whole(0, 1),
                Op::Stall { key: 0, block: 0 },
            ],
        ),
    ]
}
