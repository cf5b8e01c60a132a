//! A browser's form upload at the front: recognised by its method, its form body and the
//! absence of an `Authorization` header, and sent to the passthrough, which checks its
//! policy (the credential is in its fields).

use http::Request;
use hyper::body::Incoming;

use super::{Dispatched, Front};
use crate::api::context::RequestContext;
use crate::api::passthrough::{PostForm, form_boundary};
use crate::api::route::Address;
use crate::tenant::{Charge, charged};

impl Front {
    /// A browser's form upload (`POST /bucket`, `multipart/form-data`, signed by its
    /// policy rather than its headers), or `None` for any other request.
    pub(super) fn form_upload<B>(
        &self,
        request: &Request<B>,
        host: Option<&str>,
        context: &RequestContext,
    ) -> Option<PostForm> {
        if request.method() != http::Method::POST
            || request.headers().contains_key(http::header::AUTHORIZATION)
        {
            return None;
        }
        let boundary = form_boundary(request.headers())?;
        let address = Address::parse(request.uri(), host, self.hosts.as_ref()).ok()?;
        let (Some(bucket), None, true) = (&address.bucket, &address.key, address.query.is_empty())
        else {
            return None;
        };
        Some(PostForm {
            bucket: bucket.clone(),
            boundary,
            auth: self.auth.clone(),
            request_id: context.id().to_owned(),
        })
    }

    /// Sends a form upload to the passthrough, which verifies its policy itself: the
    /// credential is in its fields. Charged to the default tenant, since the credential
    /// is known only once the fields are read.
    pub(super) fn post_form(
        &self,
        request: Request<Incoming>,
        form: PostForm,
        context: &RequestContext,
    ) -> Dispatched {
        context.set_operation("PostObject");
        context.set_target(Some(form.bucket.clone()), None, None);
        let charge = Charge::new(self.default_tenant.clone());
        let bucket = self.metrics.ledger.bucket_label(Some(&form.bucket));
        context.set_charge(charge.clone(), bucket);
        let passthrough = self.passthrough.clone();
        let posted = async move { Ok(passthrough.handle_post(request, form).await) };
        Box::pin(charged(charge, posted))
    }
}
