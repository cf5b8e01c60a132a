//! What every S3 request passes through first: a request id, the per-request context
//! handlers fill in, request metrics, the request's trace span and access log line,
//! authentication (SigV4, unless `auth.mode = none`) and the credential's limits, the
//! removal of client signatures (Portico signs upstream requests itself), and the routing
//! decision — cached reads go to s3s and the read path (`front/cached.rs`), browser form
//! uploads (`front/form.rs`) and everything else to the passthrough.

mod cached;
mod form;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderName, HeaderValue, Request, Response};
use hyper::body::Incoming;
use s3s::S3Error;
use s3s::service::S3Service;
use tracing::Instrument;
use tracing::field::Empty;

use cached::{cached_request, finish_cached_response, response_overrides};

use super::context::{MeteredBody, Record, RequestContext, RequestIds};
use super::error::{RequestError, auth_error, error_response};
use super::host::VirtualHosts;
use super::limits::{RequestLimits, RequestRate, check_key};
use super::listener::Requests;
use super::passthrough::{Forwarded, Passthrough};
use super::route::{Address, Effect, Route, parse_query};
use super::unsigned::strip_signature;
use crate::auth::{AuthError, Authenticator, RequestHead, Verified, authorize};
use crate::read::{CacheStatus, FillSlots};
use crate::rules::Policy;
use crate::telemetry::{ACCESS_TARGET, LogLimit, Metrics, TRACE_TARGET};
use crate::tenant::{Charge, DEFAULT_TENANT, Limit, Tenant, charged};

#[derive(Clone)]
pub struct Front {
    s3: S3Service,
    passthrough: Arc<Passthrough>,
    hosts: Option<VirtualHosts>,
    metrics: Arc<Metrics>,
    ids: Arc<RequestIds>,
    /// `None` when authentication is off.
    auth: Option<Arc<Authenticator>>,
    limits: RequestLimits,
    /// The connection's request budget; `None` when unlimited or not yet per connection.
    rate: Option<Arc<RequestRate>>,
    /// The connection's open requests, for its keep-alive deadline.
    requests: Option<Arc<Requests>>,
    /// The header GET and HEAD responses say what the cache did in; `None` for none.
    cache_status_header: Option<HeaderName>,
    /// Denied client requests are logged at `info` at most once a second.
    denials: Arc<LogLimit>,
    /// The tenant of requests without a credential (`auth.mode = "none"`).
    default_tenant: Arc<Tenant>,
    /// The upstream fill slots: a tenant with as many fills waiting as it may have in
    /// flight is refused more requests.
    fills: FillSlots,
}

/// What a [`Front`] is made of.
pub struct FrontParts {
    pub s3: S3Service,
    pub passthrough: Arc<Passthrough>,
    pub hosts: Option<VirtualHosts>,
    pub metrics: Arc<Metrics>,
    /// `None` when authentication is off.
    pub auth: Option<Arc<Authenticator>>,
    pub limits: RequestLimits,
    /// The header GET and HEAD responses say what the cache did in; `None` for none.
    pub cache_status_header: Option<HeaderName>,
    pub fills: FillSlots,
}

impl Front {
    pub fn new(parts: FrontParts) -> Self {
        let FrontParts {
            s3,
            passthrough,
            hosts,
            metrics,
            auth,
            limits,
            cache_status_header,
            fills,
        } = parts;
        Self {
            s3,
            passthrough,
            hosts,
            metrics,
            ids: Arc::new(RequestIds::new()),
            auth,
            limits,
            rate: None,
            requests: None,
            cache_status_header,
            denials: Arc::new(LogLimit::per(Duration::from_secs(1))),
            default_tenant: Arc::new(Tenant::unlimited(DEFAULT_TENANT)),
            fills,
        }
    }

    /// The tenant of `verified`'s credential (the default one without), or the limit it
    /// is over.
    fn tenant_admits(
        &self,
        verified: Option<&Verified>,
    ) -> Result<Arc<Tenant>, (Arc<Tenant>, Limit)> {
        let tenant = match (&self.auth, verified) {
            (Some(auth), Some(verified)) => auth.tenant(&verified.credential),
            _ => self.default_tenant.clone(),
        };
        let backlog = |tenant: &Tenant| match tenant.max_concurrent_fills() {
            Some(cap) if self.fills.waiting(tenant.name()) >= cap => Err(Limit::Fills),
            _ => Ok(()),
        };
        match tenant.admit().and_then(|()| backlog(&tenant)) {
            Ok(()) => Ok(tenant),
            Err(limit) => Err((tenant, limit)),
        }
    }

    /// The service for one new connection, with its own request budget, counting its
    /// open requests in `requests`.
    pub fn for_connection(&self, requests: Arc<Requests>) -> Self {
        let per_second = self.limits.requests_per_second_per_connection;
        Self {
            rate: (per_second > 0).then(|| Arc::new(RequestRate::new(per_second))),
            requests: Some(requests),
            ..self.clone()
        }
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Refuses what no handler should see: a spent connection budget, an oversized URI
    /// or header section.
    fn admit<B>(&self, request: &Request<B>) -> Result<(), S3Error> {
        if let Some(rate) = &self.rate {
            rate.take()?;
        }
        self.limits.check(request)
    }

    /// Limits, then the addressed host, authentication and signature removal, then
    /// dispatch.
    fn admit_and_dispatch(
        &self,
        mut request: Request<Incoming>,
        context: &RequestContext,
    ) -> Dispatched {
        if let Err(error) = self.admit(&request) {
            tracing::debug!(request_id = context.id(), code = %error.code().as_str(), "request refused before authentication");
            context.set_operation("Refused");
            return refuse(error, context);
        }
        let host = match request_host(&request) {
            Ok(host) => host.map(str::to_owned),
            Err(error) => {
                context.set_operation("Refused");
                return refuse(error, context);
            }
        };
        if let Some(form) = self.form_upload(&request, host.as_deref(), context) {
            return self.post_form(request, form, context);
        }
        match self.authenticate(&request, host.as_deref()) {
            Ok(verified) => {
                if let Some(verified) = verified {
                    request.extensions_mut().insert(verified);
                }
                strip_signature(&mut request);
                self.dispatch(request, host.as_deref(), context)
            }
            Err(error) => {
                if self.denials.allow() {
                    tracing::info!(request_id = context.id(), %error, "client request denied: authentication failed (one such line per second at most)");
                } else {
                    tracing::debug!(request_id = context.id(), %error, "authentication failed");
                }
                context.set_operation("Unauthenticated");
                refuse(auth_error(&error), context)
            }
        }
    }

    /// Verifies the request's signature; `Ok(None)` when authentication is off.
    fn authenticate<B>(
        &self,
        request: &Request<B>,
        host: Option<&str>,
    ) -> Result<Option<Verified>, AuthError> {
        let Some(auth) = &self.auth else {
            return Ok(None);
        };
        let raw_query = request.uri().query().unwrap_or_default();
        // Only a presigned URL needs the decoded query (dispatch decodes it for routing).
        let query = if raw_query.contains("X-Amz-Signature") {
            parse_query(raw_query).unwrap_or_default()
        } else {
            Vec::new()
        };
        let head = RequestHead {
            method: request.method(),
            raw_path: request.uri().path(),
            raw_query,
            query: &query,
            headers: request.headers(),
            host: host.unwrap_or_default(),
        };
        auth.verify(&head, SystemTime::now()).map(Some)
    }

    /// Sends `request` to the cached read path or the passthrough. The address is decoded
    /// once, from the host authentication saw; it is what is authorized and what the
    /// handlers serve.
    fn dispatch(
        &self,
        request: Request<Incoming>,
        host: Option<&str>,
        context: &RequestContext,
    ) -> Dispatched {
        let address = match Address::parse(request.uri(), host, self.hosts.as_ref()) {
            Ok(address) => address,
            Err(error) => {
                return refuse(RequestError::InvalidUri(error.to_string()).into(), context);
            }
        };
        let credential = request
            .extensions()
            .get::<Verified>()
            .map(|verified| verified.credential.access_key_id.clone());
        context.set_target(address.bucket.clone(), address.key.clone(), credential);
        if let Some(key) = &address.key
            && let Err(error) = check_key(key)
        {
            return refuse(error, context);
        }
        let mut route = Route::of(request.method(), &address, request.headers());
        let policy = match (&address.bucket, &address.key) {
            (Some(bucket), Some(key)) => Some(self.passthrough.rules().policy(bucket, key).clone()),
            _ => None,
        };
        if let Some(policy) = &policy {
            context.set_rule(policy.rule.as_deref());
            if route == Route::Cached && !policy.cache {
                // A rule turned caching off: the read goes to the upstream as it came.
                context.set_cache_status(&CacheStatus::pass_through());
                let operation = if request.method() == http::Method::HEAD {
                    "HeadObject"
                } else {
                    "GetObject"
                };
                route = Route::Forward {
                    operation,
                    effect: Effect::None,
                };
            }
        }
        if let Some(verified) = request.extensions().get::<Verified>()
            && let Err(error) = authorize(
                &verified.credential,
                route.scope(request.headers()),
                address.bucket.as_deref(),
                request.headers(),
            )
        {
            if self.denials.allow() {
                tracing::info!(request_id = context.id(), access_key_id = %verified.credential.access_key_id, %error, "client request denied: outside the credential's buckets or scopes (one such line per second at most)");
            } else {
                tracing::debug!(request_id = context.id(), access_key_id = %verified.credential.access_key_id, %error, "request refused");
            }
            return refuse(auth_error(&error), context);
        }
        let tenant = match self.tenant_admits(request.extensions().get::<Verified>()) {
            Ok(tenant) => tenant,
            Err((tenant, limit)) => {
                self.metrics
                    .tenants
                    .count_refusal(tenant.name(), limit.as_str());
                tracing::debug!(
                    request_id = context.id(),
                    tenant = tenant.name(),
                    limit = limit.as_str(),
                    "request refused over its tenant's limit"
                );
                return refuse(RequestError::SlowDown.into(), context);
            }
        };
        let charge = Charge::new(tenant.clone());
        let bucket = self.metrics.ledger.bucket_label(address.bucket.as_deref());
        context.set_charge(charge.clone(), bucket);
        let admitted = Admitted {
            route,
            address,
            policy,
            tenant,
        };
        let dispatched = self.route(request, admitted, context);
        Box::pin(charged(charge, dispatched))
    }

    /// Sends an admitted request on: cached reads to s3s, the rest to the passthrough.
    fn route(
        &self,
        request: Request<Incoming>,
        admitted: Admitted,
        context: &RequestContext,
    ) -> Dispatched {
        let Admitted {
            route,
            address,
            policy,
            tenant,
        } = admitted;
        match route {
            Route::Cached => {
                let overrides = response_overrides(&address);
                let mut request = request;
                let cached = match cached_request(&mut request, &address, policy, tenant, context) {
                    Ok(cached) => cached,
                    Err(error) => return refuse(error, context),
                };
                request.extensions_mut().insert(cached);
                let call = hyper::service::Service::call(&self.s3, request);
                Box::pin(async move {
                    let mut response = call.await?;
                    finish_cached_response(&mut response, &overrides);
                    Ok(response)
                })
            }
            Route::Forward { operation, effect } => {
                context.set_operation(operation);
                let passthrough = self.passthrough.clone();
                let forwarded = Forwarded {
                    operation,
                    effect,
                    address,
                    request_id: context.id().to_owned(),
                };
                Box::pin(async move { Ok(passthrough.handle(request, forwarded).await) })
            }
        }
    }
}

/// A request let in: where it goes, and the policy and tenant it was admitted under.
struct Admitted {
    route: Route,
    address: Address,
    policy: Option<Arc<Policy>>,
    tenant: Arc<Tenant>,
}

type Dispatched = Pin<Box<dyn Future<Output = Result<Response<s3s::Body>, s3s::HttpError>> + Send>>;

/// Answers with `error` without looking further at the request.
fn refuse(error: S3Error, context: &RequestContext) -> Dispatched {
    let response = error_response(error, context.id());
    Box::pin(async move { Ok(response) })
}

/// The host a request addresses. HTTP/1 names it in `Host`, which HTTP/1.1 requires and
/// an absolute-form URI's authority must equal; HTTP/2 in `:authority`, which a `Host`
/// header, if sent, must equal. Anything else could be authorized for one bucket and
/// served from another by a parser that reads the other field.
fn request_host<B>(request: &Request<B>) -> Result<Option<&str>, S3Error> {
    let bad = |message: &'static str| S3Error::from(RequestError::BadHost(message));
    let mut hosts = request.headers().get_all(http::header::HOST).iter();
    let header = match (hosts.next(), hosts.next()) {
        (None, _) => None,
        (Some(value), None) => Some(
            value
                .to_str()
                .map_err(|_| bad("The Host header is not valid."))?,
        ),
        (Some(_), Some(_)) => return Err(bad("The request has more than one Host header.")),
    };
    let authority = request
        .uri()
        .authority()
        .map(|authority| authority.as_str());
    let agree = |header: &str, authority: &str| header.eq_ignore_ascii_case(authority);
    match request.version() {
        http::Version::HTTP_09 | http::Version::HTTP_10 | http::Version::HTTP_11 => {
            if request.version() == http::Version::HTTP_11 && header.is_none() {
                return Err(bad("HTTP/1.1 requests must carry a Host header."));
            }
            match (header, authority) {
                (Some(header), Some(authority)) if !agree(header, authority) => Err(bad(
                    "The Host header does not match the authority of the request URI.",
                )),
                (None, Some(_)) => Err(bad(
                    "A request URI with an authority needs a matching Host header.",
                )),
                _ => Ok(header),
            }
        }
        _ => match (header, authority) {
            (Some(header), Some(authority)) if !agree(header, authority) => Err(bad(
                "The Host header does not match the request's :authority.",
            )),
            (header, authority) => Ok(authority.or(header)),
        },
    }
}

impl hyper::service::Service<Request<Incoming>> for Front {
    type Response = Response<MeteredBody<s3s::Body>>;
    type Error = s3s::HttpError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let started = Instant::now();
        let started_at = SystemTime::now();
        let open = self.requests.as_ref().map(Requests::started);
        let span = tracing::info_span!(
            target: TRACE_TARGET,
            "s3.request",
            http.method = %request.method(),
            s3.request_id = Empty,
            s3.operation = Empty,
            s3.bucket = Empty,
            s3.key = Empty,
            http.status_code = Empty,
            bytes = Empty,
            cache.blocks = Empty,
            cache.hits = Empty,
            cache.misses = Empty,
            cache.source = Empty,
            cache.status = Empty,
            cache.rule = Empty,
        );
        let reported =
            !span.is_disabled() || tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO);
        let range = request
            .headers()
            .get(http::header::RANGE)
            .and_then(|value| value.to_str().ok());
        let context = RequestContext::new(self.ids.next(), reported, range);
        span.record("s3.request_id", context.id());
        let response = span.in_scope(|| self.admit_and_dispatch(request, &context));
        let metrics = self.metrics.clone();
        let traced = span.clone();
        let cache_status_header = self.cache_status_header.clone();
        Box::pin(
            async move {
                let mut response = response.await?;
                if let Ok(value) = HeaderValue::from_str(context.id()) {
                    response.headers_mut().insert("x-amz-request-id", value);
                }
                if let Some(name) = cache_status_header
                    && let Some(status) = context.cache_status()
                    && let Ok(value) = HeaderValue::from_str(status)
                {
                    response.headers_mut().insert(name, value);
                }
                let status = response.status().as_u16();
                let record = Record {
                    metrics,
                    context,
                    status,
                    started,
                    started_at,
                    sent_bytes: 0,
                    aborted: false,
                    span: traced,
                    _open: open,
                };
                Ok(response.map(|inner| MeteredBody { inner, record }))
            }
            .instrument(span),
        )
    }
}
