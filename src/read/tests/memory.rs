//! A block source held in memory: objects put by the test, answered like an S3 server
//! (ranges, `If-Match`, `If-None-Match`), with a log of every request, a switch that
//! makes it unreachable, stalls for chosen requests and streams cut short.

use std::collections::HashMap;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;

use super::{LATENCY, STALL};
use crate::object::{Checksums, Missing, ObjectMeta};
use crate::source::BlockSource;
use crate::source::{HeadIf, HeadOutcome, RangeRead, ResponseHead, StreamedRead, UpstreamError};
use crate::types::{ByteRange, ObjectRef, RangeRequest};

/// One request the source answered (or failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Call {
    Head { key: String, conditional: bool },
    Get { key: String, range: String },
}

/// Objects held in memory, answering like an S3 server, with a log of what it was asked.
#[derive(Default)]
pub(super) struct MemorySource {
    objects: Mutex<HashMap<String, (ObjectMeta, Bytes)>>,
    calls: Mutex<Vec<Call>>,
    /// Every request fails as if the server were unreachable.
    down: Mutex<bool>,
    /// `(key, range)` GETs whose next answer stalls before its head.
    stalls: Mutex<Vec<(String, String)>>,
    /// Keys whose next stream breaks off after this many bytes.
    cuts: Mutex<HashMap<String, usize>>,
    /// With gated HEADs: the HEADs waiting to be answered, oldest first. A HEAD answers
    /// from the objects as they were when it arrived.
    head_gates: Mutex<Option<std::collections::VecDeque<tokio::sync::oneshot::Sender<()>>>>,
    /// `(key, range)` GETs held on their way to the server: the next one arrives only
    /// when its sender sends or is dropped.
    holds: Mutex<HashMap<(String, String), tokio::sync::oneshot::Receiver<()>>>,
    /// GETs of a named version (`If-Match`) under way by `(key, range, ETag)`.
    inflight: Mutex<HashMap<(String, String, String), usize>>,
    /// GETs of a named version that began while another of the same range of it was
    /// under way.
    overlaps: Mutex<Vec<Overlap>>,
}

/// A GET of a block of a version that another GET of it was already fetching.
#[derive(Debug, Clone)]
pub(super) struct Overlap {
    pub(super) key: String,
    pub(super) range: String,
    pub(super) at: tokio::time::Instant,
}

/// Counts a GET as under way until it is dropped (answered, failed or abandoned).
struct Underway<'a> {
    source: &'a MemorySource,
    id: (String, String, String),
}

impl Drop for Underway<'_> {
    fn drop(&mut self) {
        let mut inflight = self.source.inflight.lock();
        if let Some(count) = inflight.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                inflight.remove(&self.id);
            }
        }
    }
}

impl MemorySource {
    /// Stores `body` under `key` with an ETag derived from `version`.
    pub(super) fn put(&self, key: &str, body: Vec<u8>, version: u32) {
        self.put_with(key, body, version, |_| {});
    }

    /// [`Self::put`], with the headers `headers` sets.
    pub(super) fn put_with(
        &self,
        key: &str,
        body: Vec<u8>,
        version: u32,
        headers: impl FnOnce(&mut ObjectMeta),
    ) {
        let mut meta = ObjectMeta {
            size: body.len() as u64,
            etag: format!("\"v{version}\""),
            last_modified_unix_secs: Some(1_700_000_000 + i64::from(version)),
            ..ObjectMeta::default()
        };
        headers(&mut meta);
        self.objects
            .lock()
            .insert(key.to_owned(), (meta, Bytes::from(body)));
    }

    /// Makes `key` an object its server sends no ETag for.
    pub(super) fn strip_etag(&self, key: &str) {
        if let Some((meta, _)) = self.objects.lock().get_mut(key) {
            meta.etag.clear();
        }
    }

    pub(super) fn calls(&self) -> Vec<Call> {
        self.calls.lock().clone()
    }

    pub(super) fn gets_of(&self, key: &str, range: &str) -> usize {
        let wanted = Call::Get {
            key: key.to_owned(),
            range: range.to_owned(),
        };
        self.calls().iter().filter(|call| **call == wanted).count()
    }

    /// GETs of `key` whose range covers block `index` (of `block` bytes): a GET of the
    /// block alone, or a stream of many.
    pub(super) fn gets_covering(&self, key: &str, index: u64, block: u64) -> usize {
        let first = index * block;
        self.calls()
            .iter()
            .filter(|call| match call {
                Call::Get { key: got, range } if got == key => range
                    .strip_prefix("bytes=")
                    .and_then(|range| range.split_once('-'))
                    .and_then(|(from, to)| {
                        Some((from.parse::<u64>().ok()?, to.parse::<u64>().ok()?))
                    })
                    .is_some_and(|(from, to)| from <= first && first <= to),
                _ => false,
            })
            .count()
    }

    pub(super) fn set_down(&self, down: bool) {
        *self.down.lock() = down;
    }

    /// From now on every HEAD waits until [`Self::release_head`] lets it answer.
    pub(super) fn gate_heads(&self) {
        *self.head_gates.lock() = Some(Default::default());
    }

    /// Lets the oldest waiting HEAD answer; whether one was waiting.
    pub(super) fn release_head(&self) -> bool {
        let next = self
            .head_gates
            .lock()
            .as_mut()
            .and_then(|gates| gates.pop_front());
        next.is_some_and(|gate| gate.send(()).is_ok())
    }

    pub(super) fn waiting_heads(&self) -> usize {
        self.head_gates
            .lock()
            .as_ref()
            .map_or(0, |gates| gates.len())
    }

    /// Holds the next GET of `range` of `key` on its way to the server until the sender
    /// returned sends or is dropped: it answers for the object as it is then.
    pub(super) fn hold_next(&self, key: &str, range: &str) -> tokio::sync::oneshot::Sender<()> {
        let (release, held) = tokio::sync::oneshot::channel();
        self.holds
            .lock()
            .insert((key.to_owned(), range.to_owned()), held);
        release
    }

    /// Every GET that began while another of the same block of the same version was under
    /// way.
    pub(super) fn overlaps(&self) -> Vec<Overlap> {
        self.overlaps.lock().clone()
    }

    /// Counts a GET of `range` of the version `etag` of `key` as it arrives.
    fn underway(&self, key: &str, range: &str, etag: &str) -> Underway<'_> {
        let id = (key.to_owned(), range.to_owned(), etag.to_owned());
        let mut inflight = self.inflight.lock();
        let count = inflight.entry(id.clone()).or_default();
        if *count > 0 {
            self.overlaps.lock().push(Overlap {
                key: key.to_owned(),
                range: range.to_owned(),
                at: tokio::time::Instant::now(),
            });
        }
        *count += 1;
        Underway { source: self, id }
    }

    pub(super) fn stall_next(&self, key: &str, range: &str) {
        self.stalls.lock().push((key.to_owned(), range.to_owned()));
    }

    /// Cuts the next stream of `key` off after its first `bytes`.
    pub(super) fn cut_next_stream(&self, key: &str, bytes: usize) {
        self.cuts.lock().insert(key.to_owned(), bytes);
    }

    /// Logs `call`, waits as the server would, and fails when the server is down.
    async fn answer(&self, call: Call) -> Result<(), UpstreamError> {
        let stalled = match &call {
            Call::Get { key, range } => {
                let mut stalls = self.stalls.lock();
                let found = stalls.iter().position(|s| s.0 == *key && s.1 == *range);
                found.map(|at| stalls.remove(at)).is_some()
            }
            _ => false,
        };
        self.calls.lock().push(call);
        tokio::time::sleep(if stalled { STALL } else { LATENCY }).await;
        if *self.down.lock() {
            return Err(UpstreamError::unreachable("connection refused"));
        }
        Ok(())
    }

    fn object(&self, key: &str) -> Result<(ObjectMeta, Bytes), UpstreamError> {
        self.objects
            .lock()
            .get(key)
            .cloned()
            .ok_or(UpstreamError::NotFound {
                missing: Missing::NoSuchKey,
                request_id: None,
            })
    }
}

#[async_trait]
impl BlockSource for MemorySource {
    async fn head(
        &self,
        object: &ObjectRef,
        wanted: HeadIf<'_>,
    ) -> Result<HeadOutcome, UpstreamError> {
        let (if_none_match, if_match) = wanted.at_the_upstream();
        let key = object.key().to_owned();
        let conditional = if_none_match.is_some() || if_match.is_some();
        // A gated HEAD reads the object when it arrives and answers when released: the
        // answer may reach the caller after the object changed.
        let gate = self.head_gates.lock().as_mut().map(|gates| {
            let (open, opened) = tokio::sync::oneshot::channel();
            gates.push_back(open);
            opened
        });
        let arrived = gate.is_some().then(|| self.object(object.key()));
        if let Some(opened) = gate {
            let _ = opened.await;
        }
        self.answer(Call::Head { key, conditional }).await?;
        let (mut meta, _) = arrived.unwrap_or_else(|| self.object(object.key()))?;
        if if_none_match == Some(meta.etag.as_str()) {
            return Ok(HeadOutcome::NotModified);
        }
        if if_match.is_some_and(|etag| etag != meta.etag) {
            return Err(UpstreamError::PreconditionFailed { request_id: None });
        }
        meta.checksums = Some(Checksums::default());
        Ok(HeadOutcome::Found(Box::new(meta)))
    }

    async fn get(
        &self,
        object: &ObjectRef,
        range: RangeRequest,
        if_match: Option<&str>,
        max_bytes: u64,
        head: &ResponseHead,
    ) -> Result<RangeRead, UpstreamError> {
        let key = object.key().to_owned();
        let header = range.header_value();
        let held = self.holds.lock().remove(&(key.clone(), header.clone()));
        if let Some(held) = held {
            let _ = held.await;
        }
        // Like S3, the version is the one the object had when the request arrived.
        let arrived = self.object(object.key());
        let _underway = if_match.map(|etag| self.underway(&key, &header, etag));
        self.answer(Call::Get { key, range: header }).await?;
        let (meta, body) = arrived?;
        if if_match.is_some_and(|etag| etag != meta.etag) {
            return Err(UpstreamError::PreconditionFailed { request_id: None });
        }
        let size = meta.size;
        let (first, last) = match range {
            RangeRequest::From { first, last } => (first, last.unwrap_or(u64::MAX)),
            RangeRequest::Suffix { length } => (size.saturating_sub(length), u64::MAX),
        };
        if first >= size {
            return Err(UpstreamError::InvalidRange { request_id: None });
        }
        let last = last.min(size - 1);
        if last - first + 1 > max_bytes {
            return Err(UpstreamError::invalid_response("more bytes than asked for"));
        }
        head.arrived();
        let body = body.slice(first as usize..=last as usize);
        Ok(RangeRead { meta, first, body })
    }

    /// Logged as the GET it is, with its range.
    async fn stream(
        &self,
        object: &ObjectRef,
        range: ByteRange,
        if_match: Option<&str>,
        head: &ResponseHead,
    ) -> Result<StreamedRead, UpstreamError> {
        let key = object.key().to_owned();
        let header = range.header_value();
        let held = self.holds.lock().remove(&(key.clone(), header.clone()));
        if let Some(held) = held {
            let _ = held.await;
        }
        // Like S3, the version is the one the object had when the request arrived.
        let arrived = self.object(object.key());
        let call = Call::Get { key, range: header };
        self.answer(call).await?;
        let (meta, body) = arrived?;
        if if_match.is_some_and(|etag| etag != meta.etag) {
            return Err(UpstreamError::PreconditionFailed { request_id: None });
        }
        // As S3 does, a range past the end is cut at the end.
        if range.first() >= meta.size {
            return Err(UpstreamError::InvalidRange { request_id: None });
        }
        let range = ByteRange::new(range.first(), range.last().min(meta.size - 1))
            .expect("a range within the object");
        head.arrived();
        let mut bytes = body.slice(range.first() as usize..=range.last() as usize);
        if let Some(cut) = self.cuts.lock().remove(object.key()) {
            bytes.truncate(cut);
        }
        let chunks = futures::stream::iter([Ok(bytes)]);
        Ok(StreamedRead::new(
            meta,
            range.first(),
            range.len_bytes(),
            chunks,
        ))
    }
}
