//! The SQS consumer: long-polls `events.sqs_queue_url` for S3 event notifications (sent by
//! S3 directly, through SNS, or by an EventBridge rule) and purges what they announce.
//!
//! Invariants: a message is deleted from the queue only once what it announces is purged
//! everywhere, or when it is malformed (it could never succeed; it is logged and counted);
//! otherwise SQS delivers it again after its visibility timeout. Receive errors back off
//! exponentially up to [`MAX_BACKOFF`]; shutdown stops the loop at once.

use std::time::Duration;

use aws_config::SdkConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::Region;
use aws_sdk_sqs::types::Message;

use super::{Invalidator, parse};
use crate::config::EventsConfig;
use crate::shutdown::Shutdown;
use crate::telemetry::{EventRejection, LogLimit};

/// Longest a receive waits for a message (SQS's maximum long poll).
const WAIT_SECONDS: i32 = 20;
/// Messages per receive (SQS's maximum).
const BATCH: i32 = 10;
/// Longest wait between two failed receives.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub struct SqsConsumer {
    client: Client,
    queue_url: String,
    invalidator: Invalidator,
    warnings: LogLimit,
}

impl SqsConsumer {
    /// A consumer of `config`'s queue through an SQS client made from `shared` (its
    /// credentials, TLS and retries), in `config.sqs_region` or else `default_region`.
    pub fn new(
        config: &EventsConfig,
        shared: &SdkConfig,
        default_region: &str,
        invalidator: Invalidator,
    ) -> Self {
        let region = if config.sqs_region.is_empty() {
            default_region
        } else {
            &config.sqs_region
        };
        // A long poll holds the response head back for up to WAIT_SECONDS.
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(5))
            .read_timeout(Duration::from_secs(WAIT_SECONDS as u64 + 10))
            .build();
        let mut builder = aws_sdk_sqs::config::Builder::from(shared)
            .region(Region::new(region.to_owned()))
            .timeout_config(timeouts);
        if let Some(endpoint) = config.sqs_endpoint_url() {
            builder = builder.endpoint_url(endpoint);
        }
        Self {
            client: Client::from_conf(builder.build()),
            queue_url: config.sqs_queue_url.clone(),
            invalidator,
            warnings: LogLimit::per(Duration::from_secs(60)),
        }
    }

    /// Runs until `shutdown`.
    pub async fn run(self, shutdown: Shutdown) {
        tracing::info!(queue = %self.queue_url, "reading S3 event notifications from SQS");
        let mut failures: u32 = 0;
        loop {
            let received = tokio::select! {
                () = shutdown.fired() => return,
                received = self.receive() => received,
            };
            let pause = match received {
                Ok(messages) => {
                    failures = 0;
                    for message in messages {
                        self.handle(message).await;
                    }
                    continue;
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    if self.warnings.allow() {
                        tracing::warn!(queue = %self.queue_url, %error, failures, "cannot receive event notifications from SQS; retrying (one such line a minute at most)");
                    }
                    Duration::from_millis(250)
                        .saturating_mul(1 << failures.min(8))
                        .min(MAX_BACKOFF)
                }
            };
            tokio::select! {
                () = shutdown.fired() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    async fn receive(&self) -> Result<Vec<Message>, String> {
        let output = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(BATCH)
            .wait_time_seconds(WAIT_SECONDS)
            .send()
            .await
            .map_err(|error| aws_sdk_sqs::error::DisplayErrorContext(error).to_string())?;
        Ok(output.messages.unwrap_or_default())
    }

    /// Applies one message and deletes it from the queue unless it is to be retried.
    async fn handle(&self, message: Message) {
        let body = message.body().unwrap_or_default();
        let done = match parse(body.as_bytes()) {
            Ok(changes) => {
                let applied = self.invalidator.apply(&changes).await;
                tracing::debug!(?applied, "SQS event notification applied");
                if applied.failed.is_empty() {
                    true
                } else {
                    tracing::warn!(failed = ?applied.failed, "an SQS event notification's purge failed; the message comes back after its visibility timeout");
                    false
                }
            }
            Err(malformed) => {
                self.invalidator
                    .metrics()
                    .count_event_rejection(EventRejection::Malformed);
                tracing::warn!(%malformed, message_id = message.message_id().unwrap_or_default(), "deleting a malformed SQS message: it is not an S3 event notification");
                true
            }
        };
        let Some(receipt) = message.receipt_handle() else {
            return;
        };
        if done
            && let Err(error) = self
                .client
                .delete_message()
                .queue_url(&self.queue_url)
                .receipt_handle(receipt)
                .send()
                .await
        {
            tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(error), "cannot delete an applied SQS message; it will be applied again");
        }
    }
}
