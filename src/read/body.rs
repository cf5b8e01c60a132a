//! Sending a GET's bytes ([`BodyStream`]): the first block's part in hand when the body
//! starts ([`take_part`]), each later one as soon as it is read ([`send_part`]), and for
//! a whole-object GET whose client asked for checksums, the check of every byte sent
//! against the CRC S3 reports ([`ResponseCheck`]).
//!
//! Invariant: a checked response whose bytes disagree with S3's CRC never ends well: its
//! last bytes are held back and the response is cut off instead, so the client's SDK
//! fails as it would on a corrupt S3 response, and the object is purged.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::integrity::Integrity;
use super::{Internal, ReadError, Tally, aborting};
use crate::cache::{Part, Tier};
use crate::checksum::{Crc, Running, full_object};
use crate::object::ObjectMeta;
use crate::telemetry::{Metrics, ServedFrom};
use crate::types::ObjectRef;

/// The CRC of a whole-object response so far, and the one S3 reports for the object.
pub(super) struct ResponseCheck {
    object: ObjectRef,
    meta: Arc<ObjectMeta>,
    integrity: Integrity,
    running: Running,
    expected: u64,
}

impl ResponseCheck {
    /// The check of a response that sends the whole of the version `meta` names; `None`
    /// when S3 reported no full-object CRC for it.
    pub(super) fn new(
        integrity: &Integrity,
        object: &ObjectRef,
        meta: &Arc<ObjectMeta>,
    ) -> Option<Self> {
        let (algorithm, expected) = full_object(meta.checksums.as_ref()?)?;
        Some(Self {
            object: object.clone(),
            meta: meta.clone(),
            integrity: integrity.clone(),
            running: Running::new(algorithm),
            expected,
        })
    }

    /// Takes `slice` into the CRC; when it ends the object, whether the CRC is S3's.
    fn passes(&mut self, slice: &[u8]) -> Result<(), ReadError> {
        self.running.update(slice);
        let crc = self.running.crc();
        if crc.len < self.meta.size || crc.value == self.expected {
            return Ok(());
        }
        let expected = Crc {
            value: self.expected,
            ..crc
        };
        self.integrity
            .metrics()
            .integrity
            .count_mismatch("response");
        self.integrity
            .wrong(&self.object, &self.meta, &expected, &crc);
        Err(ReadError::Internal(Internal::Checksum {
            object: self.object.clone(),
            expected: expected.base64(),
            computed: crc.base64(),
        }))
    }
}

/// What the task streaming a response's later blocks sends: the slices of one block's
/// part together (the connection writes them with one wake-up), or the error that cuts
/// the response off.
pub(super) type Sent = Result<Vec<Bytes>, ReadError>;

/// The sending end of a [`BodyStream`].
pub(super) type Sender = mpsc::Sender<Sent>;

/// The bytes of a GET response: the slices already in hand (a hit's first block), then
/// those a task sends as it reads the later blocks. An `Err` item means the response
/// must be aborted; nothing follows it.
///
/// A response whose blocks are all in hand needs no task: its connection finds every
/// frame ready and writes them with the head, without waiting for a wake-up between.
///
/// A body [in turns](Self::in_turns) hands its connection at most [`TURN_BYTES`] at a
/// time, and lets the other tasks of its worker run between turns.
pub struct BodyStream {
    ready: std::vec::IntoIter<Bytes>,
    /// Ends the ready slices: the response is cut off there.
    failed: Option<ReadError>,
    sent: Option<mpsc::Receiver<Sent>>,
    /// Boxed: a body in turns is the rarer one, and every body lives in a response.
    turns: Option<Box<Turns>>,
}

/// The bytes a body in turns hands its connection per turn. A connection writes what its
/// body hands it in one go, as far as the socket takes it: a whole 4 MiB block in one
/// poll of its task, milliseconds of a worker when the cores are shared with the client.
/// docs/benchmarks.md ("cold-herd: the reads a fetch releases take turns") has the
/// figures that chose 512 KiB over 256 KiB and 1 MiB.
pub(super) const TURN_BYTES: usize = 512 * 1024;

/// Where a body in turns stands: the bytes left in this turn, what is left of a slice
/// that did not fit in the last one (handed out before the ready slices), and the yield
/// between two turns.
struct Turns {
    left: usize,
    carry: Option<Bytes>,
    between: Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send + Sync>>>,
}

impl Turns {
    /// Ready when this turn has bytes left: after a full turn, once the worker has run
    /// the tasks waiting for it (`tokio::task::yield_now` puts this one behind them).
    fn poll_room(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.left == 0 {
            let between = self
                .between
                .get_or_insert_with(|| Box::pin(tokio::task::yield_now()));
            std::task::ready!(between.as_mut().poll(cx));
            self.between = None;
            self.left = TURN_BYTES;
        }
        std::task::Poll::Ready(())
    }

    /// What of `slice` this turn hands out; the rest is carried to the next.
    fn take(&mut self, mut slice: Bytes) -> Bytes {
        self.carry = (slice.len() > self.left).then(|| slice.split_off(self.left));
        self.left -= slice.len();
        slice
    }
}

impl BodyStream {
    /// A body of the slices in `ready`, then the error that cuts it off there when its
    /// check failed, else what arrives on `sent`.
    pub(super) fn new(ready: Ready, sent: Option<mpsc::Receiver<Sent>>) -> Self {
        Self {
            ready: ready.slices.into_iter(),
            failed: ready.failed,
            sent,
            turns: None,
        }
    }

    /// This body, handed to its connection in turns of [`TURN_BYTES`], each turn after
    /// the first once the tasks that wait for the worker have run. For the reads a fetch
    /// releases together (a herd): written one after another whole, the last reader's
    /// first byte waits for every other reader's first block; in turns, each starts
    /// within a turn of each other's.
    pub(super) fn in_turns(mut self) -> Self {
        self.turns = Some(Box::new(Turns {
            left: TURN_BYTES,
            carry: None,
            between: None,
        }));
        self
    }

    #[cfg(test)]
    pub(super) fn takes_turns(&self) -> bool {
        self.turns.is_some()
    }

    /// A body of what arrives from `sent`.
    pub(super) fn sent(sent: mpsc::Receiver<Sent>) -> Self {
        Self::new(Ready::default(), Some(sent))
    }
}

impl futures::Stream for BodyStream {
    type Item = Result<Bytes, ReadError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let this = &mut *self;
        loop {
            let carried = this.turns.as_mut().and_then(|turns| turns.carry.take());
            if let Some(slice) = carried.or_else(|| this.ready.next()) {
                let Some(turns) = this.turns.as_mut() else {
                    return Poll::Ready(Some(Ok(slice)));
                };
                if turns.poll_room(cx).is_pending() {
                    turns.carry = Some(slice);
                    return Poll::Pending;
                }
                return Poll::Ready(Some(Ok(turns.take(slice))));
            }
            if let Some(error) = this.failed.take() {
                this.sent = None;
                return Poll::Ready(Some(Err(error)));
            }
            let Some(sent) = this.sent.as_mut() else {
                return Poll::Ready(None);
            };
            match std::task::ready!(sent.poll_recv(cx)) {
                Some(Ok(slices)) => this.ready = slices.into_iter(),
                Some(Err(error)) => this.failed = Some(error),
                None => this.sent = None,
            }
        }
    }
}

/// The slices of a response in hand before its body starts, and the error that ends
/// them if the response check failed.
#[derive(Default)]
pub(super) struct Ready {
    slices: Vec<Bytes>,
    failed: Option<ReadError>,
}

impl Ready {
    /// Whether the response ends here (its check failed).
    pub(super) fn failed(&self) -> bool {
        self.failed.is_some()
    }
}

/// Takes the requested part of one block into the body in hand, counted in `tally` and
/// as served, checked by `check` when there is one.
pub(super) fn take_part(
    metrics: &Metrics,
    ready: &mut Ready,
    tally: &Tally,
    part: Part,
    check: &mut Option<ResponseCheck>,
) {
    let (slices, failed) = checked(metrics, tally, part, check);
    ready.slices.extend(slices);
    ready.failed = failed;
}

/// Sends the requested part of one block, counted in `tally` and as served, checked by
/// `check` when there is one; false when the client has gone or the check failed (the
/// response is cut off then).
pub(super) async fn send_part(
    metrics: &Metrics,
    sender: &Sender,
    tally: &Tally,
    part: Part,
    check: &mut Option<ResponseCheck>,
) -> bool {
    let (slices, failed) = checked(metrics, tally, part, check);
    if !slices.is_empty() && sender.send(Ok(slices)).await.is_err() {
        return false;
    }
    match failed {
        Some(error) => {
            let _ = sender.send(Err(error)).await;
            false
        }
        None => true,
    }
}

/// The slices of `part` to send, counted in `tally` and as served: all of them, or,
/// when `check` fails on one, those before it and the error that cuts the response off
/// (logged and counted).
fn checked(
    metrics: &Metrics,
    tally: &Tally,
    part: Part,
    check: &mut Option<ResponseCheck>,
) -> (Vec<Bytes>, Option<ReadError>) {
    tally.count(part.tier);
    let total = part.total_bytes() as u64;
    if part.tier == Tier::Disk {
        // A disk hit may include pieces memory held: the disk served the rest.
        let memory = (part.memory_bytes as u64).min(total);
        metrics.count_served(ServedFrom::Disk, total - memory);
        metrics.count_served(ServedFrom::Memory, memory);
    } else {
        metrics.count_served(part.tier.served_from(), total);
    }
    let mut slices = part.slices;
    let Some(checking) = check.as_mut() else {
        return (slices, None);
    };
    for (at, slice) in slices.iter().enumerate() {
        if let Err(error) = checking.passes(slice) {
            slices.truncate(at);
            let error = aborting(metrics, &checking.object, None, error);
            return (slices, Some(error));
        }
    }
    (slices, None)
}

pub(super) fn empty_body() -> BodyStream {
    BodyStream::new(Ready::default(), None)
}

#[cfg(test)]
mod tests {
    use futures::{FutureExt, StreamExt};

    use super::*;

    fn slices(texts: &[&'static str]) -> Vec<Bytes> {
        texts
            .iter()
            .map(|text| Bytes::from_static(text.as_bytes()))
            .collect()
    }

    /// The next item of `body` if it is ready without waiting.
    fn now(body: &mut BodyStream) -> Option<Option<Result<Bytes, ReadError>>> {
        body.next().now_or_never()
    }

    #[tokio::test]
    async fn the_slices_in_hand_come_first_then_each_sent_block_whole() {
        let (sender, receiver) = mpsc::channel(1);
        let ready = Ready {
            slices: slices(&["a", "b"]),
            failed: None,
        };
        let mut body = BodyStream::new(ready, Some(receiver));
        assert_eq!(now(&mut body).unwrap().unwrap().unwrap(), "a");
        assert_eq!(now(&mut body).unwrap().unwrap().unwrap(), "b");
        assert!(now(&mut body).is_none(), "nothing was sent yet");
        sender.send(Ok(slices(&["c", "d", "e"]))).await.unwrap();
        // One block's slices, sent together, are all ready once the first is.
        for expected in ["c", "d", "e"] {
            assert_eq!(now(&mut body).unwrap().unwrap().unwrap(), expected);
        }
        assert!(now(&mut body).is_none());
        drop(sender);
        assert!(
            now(&mut body).unwrap().is_none(),
            "the body ends with its sender"
        );
    }

    #[tokio::test]
    async fn a_body_in_turns_hands_out_a_turn_at_a_time_and_lets_the_worker_go_between() {
        let block: Vec<u8> = (0..2 * TURN_BYTES + TURN_BYTES / 2)
            .map(|at| (at % 251) as u8)
            .collect();
        let sent_block: Vec<u8> = (0..TURN_BYTES + 7).map(|at| (at % 241) as u8).collect();
        let (sender, receiver) = mpsc::channel(1);
        let ready = Ready {
            slices: vec![Bytes::from(block.clone())],
            failed: None,
        };
        let mut body = BodyStream::new(ready, Some(receiver)).in_turns();
        let mut bytes = Vec::new();
        let mut turns = Vec::new();
        sender
            .send(Ok(vec![Bytes::from(sent_block.clone())]))
            .await
            .unwrap();
        drop(sender);
        loop {
            // A turn: what is ready without waiting.
            let mut turn = 0;
            let ended = loop {
                match now(&mut body) {
                    Some(Some(Ok(slice))) => {
                        turn += slice.len();
                        bytes.extend_from_slice(&slice);
                    }
                    Some(Some(Err(error))) => panic!("the body was aborted: {error}"),
                    Some(None) => break true,
                    None => break false,
                }
            };
            turns.push(turn);
            if ended {
                break;
            }
            // The worker runs whatever waits for it; then the next turn is ready.
            tokio::task::yield_now().await;
        }
        let mut expected = block;
        expected.extend_from_slice(&sent_block);
        assert!(bytes == expected, "every byte, in order");
        // 2.5 turns in hand, then a sent block of a turn and 7 bytes: the half turn left
        // is filled from the sent block, whose last bytes end the body.
        let half = TURN_BYTES / 2;
        assert_eq!(
            turns,
            [TURN_BYTES, TURN_BYTES, TURN_BYTES, half + 7],
            "each turn hands out at most {TURN_BYTES} bytes"
        );

        // Without turns, everything in hand is ready at once.
        let whole = vec![0u8; 3 * TURN_BYTES];
        let mut body = BodyStream::new(
            Ready {
                slices: vec![Bytes::from(whole)],
                failed: None,
            },
            None,
        );
        assert_eq!(
            now(&mut body).unwrap().unwrap().unwrap().len(),
            3 * TURN_BYTES
        );
        assert!(now(&mut body).unwrap().is_none());
    }

    #[tokio::test]
    async fn a_body_in_hand_ends_without_a_sender_and_a_failed_one_ends_in_its_error() {
        let mut whole = BodyStream::new(
            Ready {
                slices: slices(&["x"]),
                failed: None,
            },
            None,
        );
        assert_eq!(now(&mut whole).unwrap().unwrap().unwrap(), "x");
        assert!(now(&mut whole).unwrap().is_none());

        let (sender, receiver) = mpsc::channel(1);
        let ready = Ready {
            slices: slices(&["y"]),
            failed: Some(ReadError::Changed),
        };
        let mut cut = BodyStream::new(ready, Some(receiver));
        assert_eq!(now(&mut cut).unwrap().unwrap().unwrap(), "y");
        assert!(matches!(now(&mut cut), Some(Some(Err(ReadError::Changed)))));
        // Nothing follows the error, not even what was sent after it.
        let _ = sender.try_send(Ok(slices(&["z"])));
        assert!(now(&mut cut).unwrap().is_none());
    }
}
