//! What the soak wrote, and the checks every answer goes through. Every body is a
//! function of a seed: any range of it can be generated again, so a response is checked
//! against the version its ETag names without keeping the bytes.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use md5::{Digest, Md5};
use parking_lot::Mutex;

/// How a change reached the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Through the deployment under test: every later read must see it.
    Portico,
    /// Straight to the origin: visible once the metadata TTL (or an event) has run out.
    Direct,
}

/// The bytes of one version: `length` bytes generated from `seed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Body {
    pub seed: u64,
    pub length: u64,
}

impl Body {
    /// `length` bytes from `offset`.
    pub fn range(&self, offset: u64, length: u64) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(length as usize);
        let mut at = offset;
        let end = offset + length;
        while at < end {
            let word = mix(self.seed ^ (at / 8).wrapping_mul(0xD6E8_FEB8_6659_FD93)).to_le_bytes();
            let from = (at % 8) as usize;
            let take = ((end - at) as usize).min(8 - from);
            bytes.extend_from_slice(&word[from..from + take]);
            at += take as u64;
        }
        bytes
    }

    pub fn all(&self) -> Vec<u8> {
        self.range(0, self.length)
    }
}

/// splitmix64's finaliser: every input bit reaches every output bit.
fn mix(mut value: u64) -> u64 {
    value = (value ^ (value >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    value = (value ^ (value >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    value ^ (value >> 31)
}

/// The ETag S3 gives `bytes` uploaded in one PUT.
pub fn etag_of(bytes: &[u8]) -> String {
    format!("\"{}\"", hex::encode(Md5::digest(bytes)))
}

/// The ETag S3 gives an upload of `parts`.
pub fn multipart_etag(parts: &[&[u8]]) -> String {
    let mut digests = Vec::new();
    for part in parts {
        digests.extend_from_slice(&Md5::digest(part));
    }
    format!("\"{}-{}\"", hex::encode(Md5::digest(&digests)), parts.len())
}

/// One change of a key: a version (its ETag), or a delete (`None`).
#[derive(Debug, Clone)]
struct Change {
    id: u64,
    etag: Option<String>,
    started: Instant,
    /// When the origin (through whichever path) confirmed it; `None` while under way or
    /// when it failed or its answer was lost: it may or may not have landed.
    acknowledged: Option<Instant>,
    via: Via,
    /// The version id the origin gave it (versioned buckets).
    version_id: Option<String>,
}

/// How long after a change is acknowledged a read may still miss it.
#[derive(Debug, Clone, Copy)]
pub struct Windows {
    /// For changes made straight to the origin: the metadata TTL and a margin.
    pub direct: Duration,
    /// For changes made straight to the origin under a prefix with event notifications.
    pub events: Duration,
    pub events_prefix: &'static str,
}

/// What a read saw of a key's versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Current,
    /// Older than a change acknowledged this long before the read started, within that
    /// change's window.
    Behind {
        lag: Duration,
        via: Via,
    },
    /// An older version than one acknowledged long enough before the read started.
    Stale {
        by: Duration,
        via: Via,
    },
    /// A version the soak does not know (never written, or not by this run).
    Unknown,
}

#[derive(Default)]
struct State {
    next_id: u64,
    bodies: HashMap<String, Body>,
    changes: HashMap<String, Vec<Change>>,
}

/// Changes kept per key to judge reads by (older ones are long superseded).
const KEPT_CHANGES: usize = 256;

#[derive(Default)]
pub struct Model {
    state: Mutex<State>,
}

/// A change under way; [`Model::acknowledge`] settles it.
pub struct Pending {
    key: String,
    id: u64,
}

impl Model {
    /// Records that `etag` (with `body`) or a delete (`None`) of `key` is being written.
    pub fn begin(&self, key: &str, etag: Option<(&str, Body)>, via: Via) -> Pending {
        let started = Instant::now();
        let mut state = self.state.lock();
        if let Some((etag, body)) = etag {
            state.bodies.insert(etag.to_owned(), body);
        }
        state.next_id += 1;
        let id = state.next_id;
        let changes = state.changes.entry(key.to_owned()).or_default();
        changes.push(Change {
            id,
            etag: etag.map(|(etag, _)| etag.to_owned()),
            started,
            acknowledged: None,
            via,
            version_id: None,
        });
        if changes.len() > KEPT_CHANGES {
            changes.remove(0);
        }
        Pending {
            key: key.to_owned(),
            id,
        }
    }

    /// The origin confirmed the change (with the ETag it reported, and the version id of a
    /// versioned bucket).
    pub fn acknowledge(&self, pending: &Pending, etag: Option<&str>, version_id: Option<&str>) {
        let now = Instant::now();
        let mut state = self.state.lock();
        let Some(changes) = state.changes.get_mut(&pending.key) else {
            return;
        };
        if let Some(change) = changes
            .iter_mut()
            .rev()
            .find(|change| change.id == pending.id)
        {
            if let Some(etag) = etag {
                change.etag = Some(etag.to_owned());
            }
            change.acknowledged = Some(now);
            change.version_id = version_id.map(str::to_owned);
        }
    }

    /// A copy made `etag` hold the same bytes as `source`.
    pub fn alias(&self, etag: &str, source: &str) {
        let mut state = self.state.lock();
        if let Some(body) = state.bodies.get(source).copied() {
            state.bodies.insert(etag.to_owned(), body);
        }
    }

    pub fn body(&self, etag: &str) -> Option<Body> {
        self.state.lock().bodies.get(etag).copied()
    }

    /// The newest acknowledged version of `key` (`None`: none, or deleted).
    pub fn latest(&self, key: &str) -> Option<(String, Body)> {
        let state = self.state.lock();
        let change = state
            .changes
            .get(key)?
            .iter()
            .filter(|change| change.acknowledged.is_some())
            .max_by_key(|change| change.acknowledged)?;
        let etag = change.etag.clone()?;
        let body = state.bodies.get(&etag).copied()?;
        Some((etag, body))
    }

    /// Every acknowledged version of every key: (key, version id, ETag).
    pub fn acknowledged_versions(&self) -> Vec<(String, String, String)> {
        let state = self.state.lock();
        let mut versions = Vec::new();
        for (key, changes) in &state.changes {
            for change in changes
                .iter()
                .filter(|change| change.acknowledged.is_some())
            {
                if let (Some(version), Some(etag)) = (&change.version_id, &change.etag) {
                    versions.push((key.clone(), version.clone(), etag.clone()));
                }
            }
        }
        versions.sort();
        versions
    }

    /// Every key the soak changed.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.state.lock().changes.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Judges a read of `key` that started at `started` and saw `etag` (`None`: no such
    /// key). It is stale when a change made after every write of what it saw was
    /// acknowledged longer than its window before the read started.
    pub fn judge(
        &self,
        key: &str,
        etag: Option<&str>,
        started: Instant,
        windows: Windows,
    ) -> Verdict {
        let state = self.state.lock();
        let Some(changes) = state.changes.get(key) else {
            return if etag.is_some() {
                Verdict::Unknown
            } else {
                Verdict::Current
            };
        };
        let seen: Vec<&Change> = changes
            .iter()
            .filter(|change| change.etag.as_deref() == etag)
            .collect();
        if etag.is_some() && seen.is_empty() {
            return Verdict::Unknown;
        }
        // When what was seen was last written, if every write of it is settled; a write
        // of it still unconfirmed may land after anything.
        let mut seen_settled = None;
        for change in &seen {
            match change.acknowledged {
                None => return Verdict::Current,
                Some(at) => seen_settled = seen_settled.max(Some(at)),
            }
        }
        let mut worst: Option<(Duration, Via)> = None;
        let mut behind: Option<(Duration, Via)> = None;
        for change in changes {
            if change.etag.as_deref() == etag {
                continue;
            }
            let Some(acknowledged) = change.acknowledged else {
                continue;
            };
            if seen_settled.is_some_and(|settled| change.started < settled) {
                continue;
            }
            let window = match change.via {
                Via::Portico => Duration::ZERO,
                Via::Direct if key.starts_with(windows.events_prefix) => windows.events,
                Via::Direct => windows.direct,
            };
            let Some(lag) = started.checked_duration_since(acknowledged) else {
                continue;
            };
            if lag > window {
                let by = lag - window;
                if worst.is_none_or(|(worst, _)| by > worst) {
                    worst = Some((by, change.via));
                }
            } else if behind.is_none_or(|(behind, _)| lag > behind) {
                behind = Some((lag, change.via));
            }
        }
        match (worst, behind) {
            (Some((by, via)), _) => Verdict::Stale { by, via },
            (None, Some((lag, via))) => Verdict::Behind { lag, via },
            (None, None) => Verdict::Current,
        }
    }
}

/// How `bytes` read from `offset` of the version `body` compare with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bytes {
    Right,
    /// Some bytes differ, and those match another version of the key: a mix.
    Mixed,
    Wrong,
}

/// Compares `bytes` from `offset` with `body`; where they differ, looks for another of
/// `others` that has those bytes.
pub fn compare(body: Body, offset: u64, bytes: &[u8], others: &[Body]) -> Bytes {
    if offset + bytes.len() as u64 > body.length {
        return Bytes::Wrong;
    }
    const PIECE: usize = 64 << 10;
    let mut at = 0;
    while at < bytes.len() {
        let take = PIECE.min(bytes.len() - at);
        let expected = body.range(offset + at as u64, take as u64);
        if expected != bytes[at..at + take] {
            let mixed = others.iter().any(|other| {
                *other != body
                    && offset + (at + take) as u64 <= other.length
                    && other.range(offset + at as u64, take as u64) == bytes[at..at + take]
            });
            return if mixed { Bytes::Mixed } else { Bytes::Wrong };
        }
        at += take;
    }
    Bytes::Right
}

impl Model {
    /// The bodies of every version of `key` the soak knows.
    pub fn bodies_of(&self, key: &str) -> Vec<Body> {
        let state = self.state.lock();
        state
            .changes
            .get(key)
            .map(|changes| {
                changes
                    .iter()
                    .filter_map(|change| change.etag.as_ref())
                    .filter_map(|etag| state.bodies.get(etag).copied())
                    .collect()
            })
            .unwrap_or_default()
    }
}
