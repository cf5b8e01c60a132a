//! The object headers the SDK's outputs leave out: its HeadObject output has no tagging
//! count, and its typed fields would re-format what S3 sent. An interceptor given to one
//! GET or HEAD copies the [`OBJECT_HEADERS`] of its answer verbatim.

use std::sync::{Arc, Mutex, PoisonError};

use aws_sdk_s3::client::customize::CustomizableOperation;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextRef;

use super::blank_key::RestoreKey;
use crate::BoxError;
use crate::object::{OBJECT_HEADER_MAX, OBJECT_HEADERS};

/// Where one request's interceptor leaves the object headers of its answer.
#[derive(Debug, Clone, Default)]
pub struct ObjectHeaders(Arc<Mutex<Vec<(String, String)>>>);

impl ObjectHeaders {
    /// `operation` with this capture (and `restore`, a blank key put back), ready to send.
    pub fn capturing<T, E, B>(
        &self,
        operation: CustomizableOperation<T, E, B>,
        restore: Option<RestoreKey>,
    ) -> CustomizableOperation<T, E, B> {
        let operation = operation.interceptor(self.clone());
        match restore {
            Some(restore) => operation.mutate_request(move |request| restore.apply(request)),
            None => operation,
        }
    }

    /// The headers of the last answer, sorted by name.
    pub fn take(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn keep(&self, headers: &aws_smithy_runtime_api::http::Headers) {
        let mut kept: Vec<(String, String)> = OBJECT_HEADERS
            .iter()
            .filter_map(|name| {
                let value = headers.get(*name)?;
                if value.len() > OBJECT_HEADER_MAX {
                    tracing::warn!(
                        header = name,
                        bytes = value.len(),
                        "an object header longer than any S3 sends is not kept"
                    );
                    return None;
                }
                Some(((*name).to_owned(), value.to_owned()))
            })
            .collect();
        kept.sort();
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = kept;
    }
}

impl Intercept for ObjectHeaders {
    fn name(&self) -> &'static str {
        "portico-object-headers"
    }

    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // Each attempt replaces what the one before it left: the answer kept is the last.
        self.keep(context.response().headers());
        Ok(())
    }
}
