//! The tasks that serve: the S3 listener, the admin listeners, the peer listener and the
//! SQS consumer, started on Portico's listeners from its parts. Each ends once shutdown
//! fires, and [`Serving::finish`] waits for them all.

use std::sync::Arc;

use tokio::task::JoinHandle;

use super::{AppError, Listeners, Parts};
use crate::admin::{self, AdminParts, AdminState};
use crate::api;
use crate::cluster::{self, PeerState};
use crate::config::Config;
use crate::events::SqsConsumer;
use crate::shutdown::Shutdown;

/// The tasks that serve: the S3 listener, the admin listeners, the peer listener and the
/// SQS consumer. Each ends once shutdown fires.
pub(super) struct Serving {
    s3: JoinHandle<()>,
    admin: JoinHandle<()>,
    api: Option<JoinHandle<()>>,
    sqs: Option<JoinHandle<()>>,
    peers: Option<JoinHandle<()>>,
}

impl Serving {
    /// Starts serving `parts` on `listeners` until `stopping` fires.
    pub(super) fn start(
        config: &Config,
        mut listeners: Listeners,
        parts: Parts,
        server_tls: Option<api::ServerTls>,
        stopping: Shutdown,
    ) -> Result<Self, AppError> {
        let Parts {
            metrics,
            cache,
            origins,
            shared,
            cluster,
            peer_tls,
            read,
            listings,
            maintenance,
            invalidator,
            tasks,
        } = parts;
        let auth = api::authenticator(config, stopping.clone())?;
        let peers = listeners
            .cluster
            .take()
            .zip(cluster.clone())
            .map(|(listener, cluster)| {
                let state = Arc::new(PeerState {
                    read: read.clone(),
                    cluster,
                    maintenance: maintenance.clone(),
                    metrics: metrics.clone(),
                    secret: config.cluster.secret.clone(),
                    block_size: config.cache.block_size.bytes(),
                    tls: peer_tls.clone(),
                    tenants: auth.clone(),
                });
                tokio::spawn(cluster::serve(listener, state, stopping.clone()))
            });
        let sqs = (!config.events.sqs_queue_url.is_empty()).then(|| {
            let consumer = SqsConsumer::new(
                &config.events,
                &shared,
                &config.upstream.region,
                invalidator.clone(),
            );
            tokio::spawn(consumer.run(stopping.clone()))
        });
        let front = api::service(
            config,
            api::ServiceParts {
                read,
                upstreams: origins.clone(),
                listings,
                cluster: cluster.clone(),
                tasks,
                metrics: metrics.clone(),
                auth,
            },
        );
        let s3 = tokio::spawn(api::serve(
            listeners.s3,
            front,
            server_tls,
            api::ConnectionLimits::of(&config.server),
            stopping.clone(),
            config.server.shutdown_grace.get(),
        ));
        let admin_state = Arc::new(AdminState::new(AdminParts {
            metrics,
            cache,
            upstreams: origins,
            token: config.admin.token.clone(),
            maintenance,
            cluster,
            stopping: stopping.clone(),
            events: (invalidator, config.events.token.clone()),
        }));
        let (admin_serves, api) = match listeners.admin_api {
            Some(listener) => (
                admin::Serves::Health,
                Some(tokio::spawn(admin::serve(
                    listener,
                    admin_state.clone(),
                    admin::Serves::Api,
                    stopping.clone(),
                ))),
            ),
            None => (admin::Serves::Everything, None),
        };
        let admin = tokio::spawn(admin::serve(
            listeners.admin,
            admin_state,
            admin_serves,
            stopping,
        ));
        Ok(Self {
            s3,
            admin,
            api,
            sqs,
            peers,
        })
    }

    /// Waits for every task to end (shutdown has fired), logging any that failed.
    pub(super) async fn finish(self) {
        let tasks = [
            ("S3 listener", Some(self.s3)),
            ("admin API listener", self.api),
            ("admin listener", Some(self.admin)),
            ("SQS event consumer", self.sqs),
            ("peer listener", self.peers),
        ];
        for (task, handle) in tasks {
            if let Some(handle) = handle
                && let Err(error) = handle.await
            {
                tracing::error!(%error, task, "task failed");
            }
        }
    }
}
