//! The one mapping from errors to HTTP: every error response the daemon
//! sends is an [`ApiError`], written as `{"error": {"code", "message"}}`
//! with its status; engine errors get their status and code from
//! [`engine_status`] alone.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::engine::{EngineError, Input, What};

/// The error code of [`EngineError::HostPromptOff`]: the hook, told this,
/// asks its host to wait for a reviewer instead.
pub use crate::request::transport::HOST_PROMPT_OFF;

#[derive(Debug)]
pub struct ApiError {
    pub(super) status: StatusCode,
    pub(super) code: &'static str,
    pub(super) message: String,
    pub(super) retry_after: Option<u64>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub(super) fn bad(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
}

pub use crate::request::transport::{ErrorBody, ErrorDetail};

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.into(),
                message: self.message,
            },
        };
        let mut r = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

/// The HTTP status and JSON error code of an engine error, by its cause.
pub fn engine_status(e: &EngineError) -> (StatusCode, &'static str) {
    match e {
        EngineError::NotFound {
            what: What::Run, ..
        } => (StatusCode::NOT_FOUND, "no_such_run"),
        EngineError::NotFound {
            what: What::Receipt,
            ..
        } => (StatusCode::NOT_FOUND, "no_such_receipt"),
        EngineError::BadId {
            what: What::Run, ..
        } => (StatusCode::BAD_REQUEST, "bad_run_id"),
        EngineError::BadId {
            what: What::Receipt,
            ..
        } => (StatusCode::BAD_REQUEST, "bad_receipt_id"),
        EngineError::NotAllowed { .. } => (StatusCode::FORBIDDEN, "forbidden"),
        EngineError::HostPromptOff { .. } => (StatusCode::FORBIDDEN, HOST_PROMPT_OFF),
        EngineError::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
        EngineError::Drift { .. } => (StatusCode::CONFLICT, "drift"),
        EngineError::Invalid { input, .. } => (
            StatusCode::BAD_REQUEST,
            match input {
                Input::Workspace => "invalid_workspace",
                Input::Request => "invalid_request",
            },
        ),
        EngineError::Bound(_) => (StatusCode::BAD_REQUEST, "invalid_workspace"),
        EngineError::Policy(_) => (StatusCode::BAD_REQUEST, "invalid_policy"),
        EngineError::AboveCeiling { .. } => (StatusCode::BAD_REQUEST, "invalid_envelope"),
        EngineError::QuotaExceeded { .. } => (StatusCode::INSUFFICIENT_STORAGE, "quota_exceeded"),
        EngineError::BudgetExhausted { .. } => (StatusCode::TOO_MANY_REQUESTS, "budget_exhausted"),
        EngineError::LandlockTooOld { .. } => {
            (StatusCode::SERVICE_UNAVAILABLE, "sandbox_unavailable")
        }
        EngineError::Storage { .. }
        | EngineError::Corrupt { .. }
        | EngineError::Journal(_)
        | EngineError::BudgetLedger(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

/// A request the edge could not parse: 400 with the parser's code.
impl From<crate::request::RequestError> for ApiError {
    fn from(e: crate::request::RequestError) -> Self {
        ApiError::bad(e.code, e.message)
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let (status, code) = engine_status(&e);
        let retry_after = match &e {
            EngineError::BudgetExhausted { retry_after_s, .. } => Some(*retry_after_s),
            _ => None,
        };
        if status.is_server_error() {
            tracing::error!("{e}");
        }
        ApiError {
            status,
            code,
            message: e.to_string(),
            retry_after,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_has_the_status_and_code_clients_rely_on() {
        let io = || std::io::Error::other("x");
        let cases: Vec<(EngineError, u16, &str)> = vec![
            (
                EngineError::NotFound {
                    what: What::Run,
                    id: "r1".into(),
                },
                404,
                "no_such_run",
            ),
            (
                EngineError::NotFound {
                    what: What::Receipt,
                    id: "p1".into(),
                },
                404,
                "no_such_receipt",
            ),
            (
                EngineError::BadId {
                    what: What::Run,
                    id: "x".into(),
                },
                400,
                "bad_run_id",
            ),
            (
                EngineError::NotAllowed {
                    reason: "no".into(),
                },
                403,
                "forbidden",
            ),
            (
                EngineError::Conflict {
                    state: None,
                    reason: "no".into(),
                },
                409,
                "conflict",
            ),
            (EngineError::Drift { reason: "x".into() }, 409, "drift"),
            (
                EngineError::Invalid {
                    input: Input::Workspace,
                    reason: "x".into(),
                },
                400,
                "invalid_workspace",
            ),
            (
                EngineError::Invalid {
                    input: Input::Request,
                    reason: "x".into(),
                },
                400,
                "invalid_request",
            ),
            (
                EngineError::AboveCeiling {
                    field: "pids",
                    asked: 2,
                    ceiling: 1,
                    ceilings_of: "this daemon's",
                },
                400,
                "invalid_envelope",
            ),
            (
                EngineError::QuotaExceeded {
                    uid: 1,
                    used_bytes: 2,
                    quota_bytes: 1,
                    blob_days: 7,
                    record_days: 30,
                },
                507,
                "quota_exceeded",
            ),
            (
                EngineError::BudgetExhausted {
                    message: "x".into(),
                    retry_after_s: 5,
                },
                429,
                "budget_exhausted",
            ),
            (
                EngineError::LandlockTooOld {
                    found: 1,
                    needed: 4,
                },
                503,
                "sandbox_unavailable",
            ),
            (
                EngineError::Storage {
                    path: "/x".into(),
                    source: io(),
                },
                500,
                "internal",
            ),
        ];
        for (e, status, code) in cases {
            let (s, c) = engine_status(&e);
            assert_eq!((s.as_u16(), c), (status, code), "{e:?}");
        }
        let budget = ApiError::from(EngineError::BudgetExhausted {
            message: "x".into(),
            retry_after_s: 5,
        });
        assert_eq!(budget.retry_after, Some(5));
    }
}
