//! The fleet protocol's requests to other members, as `cluster/fleet.rs` drives them:
//! invalidations, leases and cuts, each failing unless the member answers within the time
//! it is given.

use std::time::Duration;

use http::{HeaderValue, Method, StatusCode};
use portico_fleet::Token;

use super::{PeerClient, SendError};
use crate::cluster::protocol::{
    CUT_HEADER, CUT_PATH, CutRequest, INVALIDATE_PATH, InvalidateRequest, LEASE_PATH,
    LEASE_TOKEN_HEADER, LeaseGrant, LeaseRequest, ZONE_HEADER, parse_token,
};
use crate::source::PeerId;

/// Why a member did not confirm an invalidation.
#[derive(Debug)]
pub enum Untold {
    /// Its peer port refused the connection: no process listens there.
    Refused,
    /// No answer in time, or not the one asked for.
    Failed(String),
}

/// A member's answer to a lease request, and its token (none from a member of an older
/// release).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAnswer {
    /// Granted; the member's `cluster.zone`, when it has one.
    Granted {
        zone: Option<String>,
        token: Option<Token>,
        cut: Vec<PeerId>,
    },
    /// Refused: this node missed a write the member could not tell it of.
    Refused {
        token: Option<Token>,
        cut: Vec<PeerId>,
    },
}

impl PeerClient {
    /// Has `peer` forget the objects of `request`; fails unless it confirms `within`.
    pub async fn invalidate(
        &self,
        peer: &PeerId,
        request: &InvalidateRequest,
        within: Duration,
    ) -> Result<(), Untold> {
        let body =
            serde_json::to_vec(request).map_err(|error| Untold::Failed(error.to_string()))?;
        let exchange = async {
            let response = self
                .exchange(peer, Method::POST, INVALIDATE_PATH, &[], body)
                .await
                .map_err(|error| match error {
                    SendError::Refused => Untold::Refused,
                    SendError::Other(error) => Untold::Failed(error),
                })?;
            match response.status() {
                StatusCode::NO_CONTENT => Ok(()),
                other => Err(Untold::Failed(format!("answered {other}"))),
            }
        };
        tokio::time::timeout(within, exchange)
            .await
            .unwrap_or_else(|_| Err(Untold::Failed(format!("no answer within {within:?}"))))
    }

    /// Asks `peer` for a lease for this node, known to the members as `identity`, granting
    /// it one back with `grant`, and naming the members writes through this node `cut` off
    /// lately; fails unless it answers `within`.
    pub async fn lease(
        &self,
        peer: &PeerId,
        identity: &str,
        grant: Option<LeaseGrant>,
        cut: &[PeerId],
        within: Duration,
    ) -> Result<LeaseAnswer, String> {
        let request = LeaseRequest {
            member: identity.to_owned(),
            grant,
            // Only to a member that sends tokens: an older release refuses the field.
            cut: match grant {
                Some(_) => cut.iter().map(|member| member.to_string()).collect(),
                None => Vec::new(),
            },
        };
        let body = serde_json::to_vec(&request).map_err(|error| error.to_string())?;
        let exchange = async {
            let response = self
                .send(peer, Method::POST, LEASE_PATH, &[], body)
                .await
                .map_err(|error| error.to_string())?;
            let header = |name| {
                response
                    .headers()
                    .get(name)
                    .and_then(|value: &HeaderValue| value.to_str().ok())
            };
            let token = header(LEASE_TOKEN_HEADER).and_then(parse_token);
            let cut: Vec<PeerId> = header(CUT_HEADER)
                .map(|members| {
                    members
                        .split(',')
                        .filter(|member| !member.is_empty())
                        .map(crate::cluster::peer_id)
                        .collect()
                })
                .unwrap_or_default();
            match response.status() {
                StatusCode::NO_CONTENT => {
                    let zone = header(ZONE_HEADER).map(str::to_owned);
                    Ok(LeaseAnswer::Granted { zone, token, cut })
                }
                StatusCode::CONFLICT => Ok(LeaseAnswer::Refused { token, cut }),
                other => Err(format!("answered {other}")),
            }
        };
        tokio::time::timeout(within, exchange)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {within:?}")))
    }

    /// Tells `peer` that writes through this node cut `members` off; fails unless it
    /// confirms `within`.
    pub async fn cut(
        &self,
        peer: &PeerId,
        members: &[PeerId],
        within: Duration,
    ) -> Result<(), String> {
        let request = CutRequest {
            members: members.iter().map(|member| member.to_string()).collect(),
        };
        let body = serde_json::to_vec(&request).map_err(|error| error.to_string())?;
        let exchange = async {
            let response = self
                .send(peer, Method::POST, CUT_PATH, &[], body)
                .await
                .map_err(|error| error.to_string())?;
            match response.status() {
                StatusCode::NO_CONTENT => Ok(()),
                other => Err(format!("answered {other}")),
            }
        };
        tokio::time::timeout(within, exchange)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {within:?}")))
    }
}
