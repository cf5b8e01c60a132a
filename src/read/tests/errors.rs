//! Internal read errors keep their cause.

use std::sync::Arc;

use crate::read::{Internal, ReadError};
use crate::telemetry::error_chain;

#[tokio::test]
async fn a_failed_lookup_task_keeps_its_panic_as_the_cause() {
    let joined = tokio::spawn(async { panic!("the lookup broke") })
        .await
        .expect_err("the task panicked");
    let error = ReadError::Internal(Internal::Lookup {
        index: 7,
        cause: Arc::new(joined),
    });
    let source = std::error::Error::source(&error).expect("a cause");
    assert!(source.to_string().contains("panicked"), "{source}");
    let chain = error_chain(&error);
    assert!(
        chain.starts_with("the lookup of block 7 did not complete: ")
            && chain.contains("the lookup broke"),
        "{chain}"
    );
    assert_eq!(error.source_kind(), crate::read::ErrorSource::Internal);
    assert_eq!(error.clone(), error, "clones compare equal");
}
