//! `[events]`: invalidation from S3 event notifications, pushed to the admin listener
//! (a webhook) or pulled from an SQS queue.

use serde::{Deserialize, Serialize};

use super::ConfigError;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventsConfig {
    /// The bearer token `POST /events/s3` on the admin listener requires; empty: the
    /// endpoint refuses every request.
    pub token: String,
    /// An SQS queue S3 (directly, or through SNS or EventBridge) sends event notifications
    /// to; empty: no queue is read.
    pub sqs_queue_url: String,
    /// The SQS endpoint; empty: AWS's for `sqs_region` when the queue URL is AWS's, else
    /// the queue URL's scheme and host.
    pub sqs_endpoint: String,
    /// The queue's region; empty: `upstream.region`.
    pub sqs_region: String,
}

impl EventsConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (key, url) in [
            ("sqs_queue_url", &self.sqs_queue_url),
            ("sqs_endpoint", &self.sqs_endpoint),
        ] {
            if !(url.is_empty() || url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::not_accepted(
                    format!("events.{key}"),
                    format_args!("{url:?}"),
                    "an http:// or https:// URL, or empty",
                ));
            }
        }
        if !self.sqs_endpoint.is_empty() && self.sqs_queue_url.is_empty() {
            return Err(ConfigError::set_only_with(
                "events.sqs_endpoint",
                "events.sqs_queue_url",
            ));
        }
        Ok(())
    }

    /// The endpoint the SQS client sends to: `None` for AWS's own.
    pub fn sqs_endpoint_url(&self) -> Option<String> {
        if !self.sqs_endpoint.is_empty() {
            return Some(self.sqs_endpoint.clone());
        }
        let (scheme, rest) = self.sqs_queue_url.split_once("://")?;
        let host = rest.split('/').next().unwrap_or_default();
        let aws = host
            .split(':')
            .next()
            .is_some_and(|name| name.ends_with(".amazonaws.com"));
        (!aws).then(|| format!("{scheme}://{host}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(url: &str) -> EventsConfig {
        EventsConfig {
            sqs_queue_url: url.to_owned(),
            ..EventsConfig::default()
        }
    }

    #[test]
    fn the_sqs_endpoint_is_aws_for_aws_queues_and_the_queue_host_otherwise() {
        let aws = queue("https://sqs.eu-west-1.amazonaws.com/123456789012/portico-events");
        assert_eq!(aws.sqs_endpoint_url(), None);
        let local = queue("http://127.0.0.1:9324/000000000000/events");
        assert_eq!(
            local.sqs_endpoint_url().as_deref(),
            Some("http://127.0.0.1:9324")
        );
        let explicit = EventsConfig {
            sqs_endpoint: "https://vpce-1.sqs.eu-west-1.vpce.amazonaws.com".to_owned(),
            ..aws
        };
        assert_eq!(
            explicit.sqs_endpoint_url().as_deref(),
            Some("https://vpce-1.sqs.eu-west-1.vpce.amazonaws.com")
        );
        assert!(queue("sqs://queue").validate().is_err());
        let orphan = EventsConfig {
            sqs_endpoint: "http://127.0.0.1:9324".to_owned(),
            ..EventsConfig::default()
        };
        assert!(orphan.validate().is_err());
    }
}
