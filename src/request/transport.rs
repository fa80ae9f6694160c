//! The way to a daemon: HTTP/1.1 over its Unix socket (hyper), one small
//! current-thread runtime per call. [`Client::send`] carries a typed
//! [`Operation`]; [`Client::request`] is the raw form (tests, probes).

use std::path::{Path, PathBuf};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;

use super::Operation;

/// The system daemon's socket.
pub const SYSTEM_SOCKET: &str = "/run/dryrun/dryrun.sock";

/// The API error code saying approvals in an agent host's prompt are off
/// on this daemon.
pub const HOST_PROMPT_OFF: &str = "host_prompt_approvals_off";

/// Where a daemon listens when not told otherwise: the system socket for
/// root, else the user's runtime directory.
pub fn default_socket() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from(SYSTEM_SOCKET);
    }
    user_socket().unwrap_or_else(|| PathBuf::from(SYSTEM_SOCKET))
}

/// `$XDG_RUNTIME_DIR/dryrun.sock`, when that directory is set.
pub fn user_socket() -> Option<PathBuf> {
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|v| !v.is_empty())
        .map(|d| PathBuf::from(d).join("dryrun.sock"))
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "cannot reach the dryrun daemon at {socket}: {source}; start it (dryrun daemon) or pass --local"
    )]
    Connect {
        socket: PathBuf,
        source: std::io::Error,
    },
    #[error("talking to the daemon at {socket}: {message}")]
    Http { socket: PathBuf, message: String },
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
}

impl ClientError {
    /// The caller's mistake (exit 2) versus a failure (exit 1).
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, ClientError::Api { status, .. } if matches!(status, 400 | 403 | 404 | 405 | 409 | 413))
    }
}

pub struct Client {
    socket: PathBuf,
}

pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Client {
    pub fn new(socket: &Path) -> Client {
        Client {
            socket: socket.to_path_buf(),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Is something accepting connections there?
    pub fn reachable(socket: &Path) -> bool {
        std::os::unix::net::UnixStream::connect(socket).is_ok()
    }

    /// One request; any status comes back as a [`Response`].
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Response, ClientError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| self.http(e))?;
        rt.block_on(async {
            let stream = tokio::net::UnixStream::connect(&self.socket)
                .await
                .map_err(|source| ClientError::Connect {
                    socket: self.socket.clone(),
                    source,
                })?;
            let io = hyper_util::rt::TokioIo::new(stream);
            let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| self.http(e))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            let req = hyper::Request::builder()
                .method(method)
                .uri(path)
                .header(hyper::header::HOST, "dryrun")
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(body.unwrap_or_default())))
                .map_err(|e| self.http(e))?;
            let resp = sender.send_request(req).await.map_err(|e| self.http(e))?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| self.http(e))?
                .to_bytes()
                .to_vec();
            Ok(Response { status, body })
        })
    }

    fn http(&self, e: impl std::fmt::Display) -> ClientError {
        ClientError::Http {
            socket: self.socket.clone(),
            message: e.to_string(),
        }
    }

    /// A request whose 2xx answer is `T`; an error answer becomes
    /// [`ClientError::Api`] with the daemon's code and message.
    pub fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ClientError> {
        let r = self.request(method, path, body)?;
        if !(200..300).contains(&r.status) {
            let (code, message) = match serde_json::from_slice::<ErrorBody>(&r.body) {
                Ok(e) => (e.error.code, e.error.message),
                Err(_) => (
                    "unknown".into(),
                    String::from_utf8_lossy(&r.body).chars().take(500).collect(),
                ),
            };
            return Err(ClientError::Api {
                status: r.status,
                code,
                message,
            });
        }
        serde_json::from_slice(&r.body).map_err(|e| self.http(format!("unexpected answer ({e})")))
    }

    /// One typed operation; its reply, or the daemon's error.
    pub(crate) fn send<O: Operation>(&self, op: &O) -> Result<O::Reply, ClientError> {
        self.call(O::METHOD.as_str(), &op.target(), op.body())
    }
}

/// The JSON error body every error answer carries.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// `{"code", "message"}` of an error answer.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}
