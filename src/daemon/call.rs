//! What every API handler starts from, extracted once: the daemon, the
//! caller (from the socket's credentials, never from the request) and the
//! raw query; for routes under `/v1/runs/{id}` the id as given (validated
//! when the request is parsed).

use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, Path as UrlPath, RawQuery};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};

use super::app::{App, Peer, blocking};
use super::error::ApiError;
use crate::request::serve::{Caller, Serve};

pub(super) struct Call {
    pub app: Arc<App>,
    pub caller: Caller,
    /// The connection's peer (its pinned process, for `peer_ns`).
    pub peer: Peer,
    query: Option<String>,
}

impl Call {
    /// The raw query string, as the request parsers take it.
    pub fn query(&self) -> Option<&str> {
        self.query.as_deref()
    }

    /// Carry out a parsed request on the engine, off the async threads;
    /// the reply as JSON.
    pub async fn serve<O>(&self, op: O) -> Result<Response, ApiError>
    where
        O: Serve + Send + 'static,
        O::Reply: Send + 'static,
    {
        Ok(axum::Json(self.run(op).await?).into_response())
    }

    /// As [`Call::serve`], the typed reply.
    pub async fn run<O>(&self, op: O) -> Result<O::Reply, ApiError>
    where
        O: Serve + Send + 'static,
        O::Reply: Send + 'static,
    {
        let (engine, caller) = (self.app.engine.clone(), self.caller.clone());
        blocking(move || op.serve(&engine, &caller)).await
    }
}

impl FromRequestParts<Arc<App>> for Call {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, ApiError> {
        let Some(ConnectInfo(peer)) = parts.extensions.get::<ConnectInfo<Peer>>().cloned() else {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "no_peer_credentials",
                "the daemon could not read this connection's peer credentials",
            ));
        };
        let caller = app.caller(&peer)?;
        let RawQuery(query) = RawQuery::from_request_parts(parts, app)
            .await
            .unwrap_or(RawQuery(None));
        Ok(Call {
            app: app.clone(),
            caller,
            peer,
            query,
        })
    }
}

/// A call on one run: `/v1/runs/{id}/...` or `/v1/receipts/{id}/...`.
pub(super) struct RunCall {
    pub call: Call,
    pub id: String,
}

impl std::ops::Deref for RunCall {
    type Target = Call;
    fn deref(&self) -> &Call {
        &self.call
    }
}

impl FromRequestParts<Arc<App>> for RunCall {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, ApiError> {
        let call = Call::from_request_parts(parts, app).await?;
        let UrlPath(id) = UrlPath::<String>::from_request_parts(parts, app)
            .await
            .map_err(|_| {
                ApiError::bad("invalid_request", "the id in the path is not valid UTF-8")
            })?;
        Ok(RunCall { call, id })
    }
}
