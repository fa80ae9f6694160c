//! The per-run egress proxy, on the host, in the engine's process: a
//! thread with its own small tokio runtime, so it works the same under the
//! daemon and in-process.
//!
//! 1. [`start`] makes a private directory (0700) with the control socket;
//!    the sandbox's helper connects to it and hands over the sockets it
//!    created inside the sandbox's network namespace: a listening TCP
//!    socket and a UDP socket on its port 53, both on the sandbox's
//!    loopback.
//! 2. The proxy serves HTTP/1.1 on the listener (hyper): `CONNECT
//!    host:port` tunnels and absolute-form `http://` requests, to allowed
//!    names only. It resolves names itself, refuses addresses that lead
//!    back to the host or its networks (see [`super::addr`]: ranges, and
//!    the kernel's route at connect time) unless the system pinned the
//!    name, and counts bytes each way. With `network: none` it answers
//!    every request `403` at once, naming the run's intent: a tool told
//!    "forbidden" by its proxy gives up, where one whose lookup fails
//!    retries (npm for about 70 s), and the name is recorded.
//! 3. The DNS responder ([`super::dns`]) records every name asked for, in
//!    every run: with `network: none` it answers REFUSED (as a resolver
//!    that cannot be reached, which is what the run had before), so a
//!    lookup is evidence by name, not a datagram to an address.
//! 4. [`EgressProxy::finish`] stops it and returns the log by destination.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::dns::{self, FakeAddrs};
use super::forward::{ServiceSet, serve_service};
use super::route::Kernel;
use super::service::ServiceRule;
use super::upstream::{Attempt, address_refusal, connect_checked};
use super::{Admission, EgressConfig, addr, normalize_name};
use crate::model::{EgressEntry, EgressHow};

/// The proxy's port on the sandbox's loopback.
pub const PROXY_PORT: u16 = 3128;
/// Destinations kept per run; later ones are counted.
const MAX_ENTRIES: usize = 256;
/// Resolving and connecting to an upstream, each.
pub(super) const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections from the sandbox served at once (each holds a descriptor
/// of the engine's process, and a tunnel or forward a second one, to the
/// upstream). Past it the proxy stops accepting: further connections wait
/// in the sandbox's own listen queue, costing the host nothing.
pub(super) const MAX_CLIENTS: usize = 64;
/// A request's head (request line and headers) must arrive within this.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head the proxy reads (hyper's buffer); a bigger one
/// is answered 431 and the connection closed.
const MAX_HEAD: usize = 64 * 1024;

/// Why every name is refused in a run with `network: none` (a lookup's
/// and a proxy request's reason).
const NO_NETWORK: &str = "the run's intent.network is none: no name may be reached (declare the hosts the command needs in intent.network.allow)";

/// How the sandbox's helper hands over its sockets: receives file
/// descriptors sent with `SCM_RIGHTS` (the sandbox provides it; taking
/// ownership of a received descriptor is the sandbox's kind of code).
pub type ReceiveFds = fn(&StdUnixStream) -> io::Result<Vec<OwnedFd>>;

#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error(
        "cannot create the egress proxy's private directory {path}: {source}; check that the temporary directory ($TMPDIR) is writable"
    )]
    Dir { path: PathBuf, source: io::Error },
    #[error("cannot listen on the egress proxy's control socket {path}: {source}")]
    Listen { path: PathBuf, source: io::Error },
    #[error("cannot start the egress proxy's thread: {0}")]
    Thread(io::Error),
}

/// What a run's egress serves.
#[derive(Debug, Clone)]
pub enum Serve {
    /// `network: none`: the DNS responder records every name and answers
    /// REFUSED; the proxy refuses every request (`403`), recording it.
    NoNetwork,
    /// An allowlist: the proxy, and the DNS responder answering with
    /// addresses that lead nowhere.
    Allowlist(EgressConfig),
}

/// What the proxy saw, by destination.
#[derive(Debug, Default)]
pub struct EgressLog {
    /// A run with `network: none` (every name refused).
    pub no_network: bool,
    pub entries: Vec<EgressEntry>,
    /// Destinations past the cap (not listed).
    pub dropped: u64,
    /// The DNS responder's fake addresses, to name direct connections.
    pub fake_addrs: HashMap<Ipv4Addr, String>,
    /// Why the proxy never served the sandbox (its sockets never came).
    pub problem: Option<String>,
}

/// A running proxy; dropping it stops it too.
pub struct EgressProxy {
    dir: PathBuf,
    control: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Closed by the proxy's thread when its serve loop has returned: no
    /// entry is logged after that. The runtime's teardown (its tasks
    /// dropped, its drivers closed) then goes on without the engine
    /// waiting for it.
    served: Option<std::sync::mpsc::Receiver<()>>,
    shared: Arc<Shared>,
}

/// Start a proxy for one run (fail closed: an error means no rehearsal),
/// serving `services` too (see `forward.rs`).
/// `release` says when the sandbox may start the command (see
/// `handover.rs`).
pub fn start(
    what: Serve,
    services: Option<ServiceSet>,
    receive: ReceiveFds,
    release: super::handover::Release,
) -> Result<EgressProxy, EgressError> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("the kernel's random source works");
    let dir = std::env::temp_dir().join(format!("dryrun-egress-{}", hex::encode(b)));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|source| EgressError::Dir {
            path: dir.clone(),
            source,
        })?;
    let control = dir.join("control.sock");
    let listener =
        std::os::unix::net::UnixListener::bind(&control).map_err(|source| EgressError::Listen {
            path: control.clone(),
            source,
        });
    let listener = match listener.and_then(|l| {
        l.set_nonblocking(true)
            .map_err(|source| EgressError::Listen {
                path: control.clone(),
                source,
            })
            .map(|()| l)
    }) {
        Ok(l) => l,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    let shared = Arc::new(Shared {
        serve: what,
        services: services.map(Arc::new),
        log: Mutex::new(Log::default()),
    });
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let (served_tx, served_rx) = std::sync::mpsc::channel::<()>();
    let sh = shared.clone();
    let thread = std::thread::Builder::new()
        .name("dryrun-egress".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    sh.problem(format!("the proxy's runtime did not start: {e}"));
                    return;
                }
            };
            rt.block_on(serve(sh, listener, receive, release, stop_rx));
            // Connections still being served only add to their
            // destinations' byte counters; their entries are logged.
            drop(served_tx);
            rt.shutdown_timeout(Duration::from_millis(100));
        })
        .map_err(EgressError::Thread);
    if let Err(e) = thread {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    Ok(EgressProxy {
        dir,
        control,
        stop: Some(stop_tx),
        served: Some(served_rx),
        shared,
    })
}

impl EgressProxy {
    /// The control socket the sandbox's helper connects to.
    pub fn control_path(&self) -> &Path {
        &self.control
    }

    /// Stop serving and return what was seen (the sandbox is over: every
    /// byte it sent or received has been counted).
    pub fn finish(mut self) -> EgressLog {
        self.stop_now();
        let mut log = self.shared.log.lock().unwrap_or_else(|p| p.into_inner());
        let entries = log
            .entries
            .iter()
            .map(|(e, c)| {
                let mut e = e.clone();
                e.bytes_out = c.out.load(Ordering::Relaxed);
                e.bytes_in = c.inn.load(Ordering::Relaxed);
                e
            })
            .collect();
        EgressLog {
            no_network: matches!(self.shared.serve, Serve::NoNetwork),
            entries,
            dropped: log.dropped + log.fake.dropped,
            fake_addrs: std::mem::take(&mut log.fake.by_addr),
            problem: log.problem.take(),
        }
    }

    fn stop_now(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(served) = self.served.take() {
            // Disconnected when the serve loop returned (or the thread
            // ended in any other way).
            let _ = served.recv();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Bytes through one destination (summed over its connections).
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) out: AtomicU64,
    pub(super) inn: AtomicU64,
}

#[derive(Default)]
struct Log {
    entries: Vec<(EgressEntry, Arc<Counters>)>,
    index: HashMap<(String, Option<u16>, EgressHow), usize>,
    dropped: u64,
    fake: FakeAddrs,
    problem: Option<String>,
}

pub(super) struct Shared {
    serve: Serve,
    services: Option<Arc<ServiceSet>>,
    log: Mutex<Log>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn problem(&self, why: String) {
        self.lock().problem.get_or_insert(why);
    }

    /// Note one attempt; returns the destination's byte counters.
    pub(super) fn record(
        &self,
        name: &str,
        port: Option<u16>,
        how: EgressHow,
        allowed: bool,
        reason: Option<String>,
    ) -> Arc<Counters> {
        let mut log = self.lock();
        let key = (name.to_string(), port, how);
        if let Some(&i) = log.index.get(&key) {
            let (e, c) = &mut log.entries[i];
            // A refusal is what the reviewer must see, whatever came first,
            // and its reason replaces one of an allowed attempt's.
            if !allowed && e.allowed {
                e.allowed = false;
                e.reason = reason;
            } else if e.reason.is_none() {
                e.reason = reason;
            }
            return c.clone();
        }
        let counters = Arc::new(Counters::default());
        if log.entries.len() >= MAX_ENTRIES {
            log.dropped += 1;
            return counters;
        }
        let i = log.entries.len();
        log.entries.push((
            EgressEntry {
                name: name.to_string(),
                port,
                how,
                allowed,
                reason,
                bytes_out: 0,
                bytes_in: 0,
                disposable: false,
            },
            counters.clone(),
        ));
        log.index.insert(key, i);
        counters
    }

    /// Note a connection to a declared service (`how: service`, with the
    /// service's disposability); returns its byte counters.
    pub(super) fn record_service(&self, rule: &ServiceRule) -> Arc<Counters> {
        let (name, port) = rule.endpoint.report_name();
        let c = self.record(&name, port, EgressHow::Service, true, None);
        let mut log = self.lock();
        if let Some(&i) = log.index.get(&(name, port, EgressHow::Service)) {
            log.entries[i].0.disposable = rule.disposable;
        }
        c
    }

    /// Admit, resolve, check the addresses, connect. `Err` is the reason
    /// given to the command (and recorded).
    ///
    /// Every address is checked ([`addr::check`]) before any is tried (one
    /// refused address refuses the name), and each again right before and
    /// right after the proxy connects to it: the kernel's answer about
    /// this host's own addresses is the one in force at the connect, not
    /// at the lookup. A pinned name is exempt (the system chose its
    /// address).
    async fn open(
        &self,
        name: &str,
        port: u16,
    ) -> Result<(tokio::net::TcpStream, Arc<Counters>), String> {
        let refused_name = super::refused_request_name(name);
        if matches!(self.serve, Serve::NoNetwork) {
            // Nothing is reached whatever the name: the reason is the run's.
            let shown = refused_name.map_or_else(|| name.to_string(), |(shown, _)| shown);
            self.record(
                &shown,
                Some(port),
                EgressHow::Proxy,
                false,
                Some(NO_NETWORK.into()),
            );
            return Err(NO_NETWORK.into());
        }
        if let Some((shown, why)) = refused_name {
            self.record(
                &shown,
                Some(port),
                EgressHow::Proxy,
                false,
                Some(why.clone()),
            );
            return Err(why);
        }
        let refuse = |why: String| {
            self.record(name, Some(port), EgressHow::Proxy, false, Some(why.clone()));
            Err(why)
        };
        let Serve::Allowlist(cfg) = &self.serve else {
            return refuse(NO_NETWORK.into());
        };
        if let Admission::Refused(why) = cfg.admit(name, Some(port)) {
            return refuse(why);
        }
        // Route lookups from this thread: the network namespace the
        // connections below are made in.
        let routes = Kernel;
        let pinned = cfg.pinned(name, port);
        let addrs: Vec<SocketAddr> = match pinned {
            Some(a) => vec![SocketAddr::new(a, port)],
            None => {
                let looked = tokio::time::timeout(
                    UPSTREAM_TIMEOUT,
                    tokio::net::lookup_host((name.to_string(), port)),
                )
                .await;
                let addrs: Vec<SocketAddr> = match looked {
                    Ok(Ok(a)) => a.collect(),
                    Ok(Err(e)) => return refuse(format!("cannot resolve {name}: {e}")),
                    Err(_) => return refuse(format!("resolving {name} timed out")),
                };
                if addrs.is_empty() {
                    return refuse(format!("{name} has no address"));
                }
                let ips: Vec<_> = addrs.iter().map(|a| a.ip()).collect();
                if let Some((a, why)) = addr::first_refused(&ips, &routes) {
                    return refuse(address_refusal(name, a, &why));
                }
                addrs
            }
        };
        // A pinned name's address is the system's choice: not checked.
        let check = |ip| match pinned {
            Some(_) => Ok(()),
            None => addr::check(ip, &routes),
        };
        let mut last = String::from("no address");
        for a in addrs {
            match connect_checked(a, check).await {
                Ok(s) => {
                    let c = self.record(name, Some(port), EgressHow::Proxy, true, None);
                    return Ok((s, c));
                }
                Err(Attempt::Refused(why)) => return refuse(address_refusal(name, a.ip(), &why)),
                Err(Attempt::Failed(why)) => last = why,
            }
        }
        self.record(name, Some(port), EgressHow::Proxy, true, Some(last.clone()));
        Err(last)
    }
}

async fn serve(
    shared: Arc<Shared>,
    control: std::os::unix::net::UnixListener,
    receive: ReceiveFds,
    release: super::handover::Release,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let rules = shared
        .services
        .as_ref()
        .map_or(Vec::new(), |s| s.rules.clone());
    let sockets = tokio::select! {
        _ = &mut stop => return,
        s = super::handover::take_sockets(control, receive, rules, release) => s,
    };
    let (tcp, udp, service_listeners) = match sockets {
        Ok(s) => s,
        Err(e) => {
            shared.problem(format!(
                "the sandbox never handed the proxy its sockets: {e}"
            ));
            let _ = stop.await;
            return;
        }
    };
    let mut tasks = vec![tokio::spawn(serve_dns(udp, shared.clone()))];
    if let Some(set) = &shared.services {
        for (l, rule) in service_listeners.into_iter().zip(&set.rules) {
            let (rule, shared, set) = (rule.clone(), shared.clone(), set.clone());
            tasks.push(tokio::spawn(serve_service(l, rule, shared, set)));
        }
    }
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CLIENTS));
    loop {
        // A free slot first, then a connection: at the cap, nothing more
        // is accepted (no descriptor of the engine's is spent on it).
        let slot = tokio::select! {
            _ = &mut stop => break,
            s = slots.clone().acquire_owned() => match s {
                Ok(s) => Arc::new(s),
                Err(_) => break,
            },
        };
        tokio::select! {
            _ = &mut stop => break,
            acc = tcp.accept() => {
                if let Ok((stream, _)) = acc {
                    tokio::spawn(serve_client(stream, shared.clone(), slot));
                }
            }
        }
    }
    tasks.iter().for_each(|t| t.abort());
}

async fn serve_dns(udp: tokio::net::UdpSocket, shared: Arc<Shared>) {
    let mut buf = [0u8; 1500];
    let how = match shared.serve {
        Serve::NoNetwork => dns::Reply::Refused,
        Serve::Allowlist(_) => dns::Reply::AddressLeadingNowhere,
    };
    while let Ok((n, from)) = udp.recv_from(&mut buf).await {
        let answered = dns::answer(&buf[..n], how, &mut shared.lock().fake);
        let Some((reply, name)) = answered else {
            continue;
        };
        let (allowed, reason) = match &shared.serve {
            Serve::NoNetwork => (false, Some(format!("looked up: {NO_NETWORK}"))),
            Serve::Allowlist(cfg) => match cfg.admit(&name, None) {
                Admission::Allowed => (true, None),
                Admission::Refused(why) => (false, Some(format!("looked up: {why}"))),
            },
        };
        shared.record(&name, None, EgressHow::Dns, allowed, reason);
        let _ = udp.send_to(&reply, from).await;
    }
}

type ProxyBody = BoxBody<Bytes, hyper::Error>;

fn text(status: StatusCode, msg: String) -> Response<ProxyBody> {
    let mut r = Response::new(
        Full::new(Bytes::from(format!("dryrun egress proxy: {msg}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r
}

/// One of the proxy's [`MAX_CLIENTS`] slots, held by a client connection
/// and by whatever it started that outlives it (a tunnel, an upstream
/// connection).
type Slot = Arc<tokio::sync::OwnedSemaphorePermit>;

async fn serve_client(stream: tokio::net::TcpStream, shared: Arc<Shared>, slot: Slot) {
    let svc = hyper::service::service_fn(move |req| handle(req, shared.clone(), slot.clone()));
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .serve_connection(TokioIo::new(stream), svc)
        .with_upgrades()
        .await;
}

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    slot: Slot,
) -> Result<Response<ProxyBody>, Infallible> {
    Ok(if req.method() == Method::CONNECT {
        tunnel(req, shared, slot).await
    } else {
        forward(req, shared, slot).await
    })
}

/// `CONNECT host:port`: a tunnel to an allowed name. Its first bytes are
/// read before any goes upstream: a TLS ClientHello must name the same
/// host (see [`super::tunnel`]); the rest is counted, not read.
async fn tunnel(req: Request<Incoming>, shared: Arc<Shared>, slot: Slot) -> Response<ProxyBody> {
    let Some(auth) = req.uri().authority().cloned() else {
        return text(StatusCode::BAD_REQUEST, "CONNECT needs host:port".into());
    };
    let name = normalize_name(auth.host());
    let port = auth.port_u16().unwrap_or(443);
    let (upstream, counters) = match shared.open(&name, port).await {
        Ok(x) => x,
        Err(why) => return text(StatusCode::FORBIDDEN, format!("{name}:{port}: {why}")),
    };
    tokio::spawn(async move {
        let _slot = slot;
        if let Ok(up) = hyper::upgrade::on(req).await {
            let tunnel = super::tunnel::Tunnel {
                name: &name,
                port,
                counters,
            };
            tunnel
                .splice_checked(TokioIo::new(up), upstream, &shared)
                .await;
        }
    });
    Response::new(
        Full::new(Bytes::new())
            .map_err(|never| match never {})
            .boxed(),
    )
}

/// An absolute-form `http://` request, forwarded to an allowed name.
async fn forward(
    mut req: Request<Incoming>,
    shared: Arc<Shared>,
    slot: Slot,
) -> Response<ProxyBody> {
    let uri = req.uri().clone();
    if uri.scheme_str() != Some("http") {
        return text(
            StatusCode::BAD_REQUEST,
            "this proxy forwards http:// URLs and CONNECT tunnels only".into(),
        );
    }
    let Some(auth) = uri.authority().cloned() else {
        return text(StatusCode::BAD_REQUEST, "the URL names no host".into());
    };
    let name = normalize_name(auth.host());
    let port = auth.port_u16().unwrap_or(80);
    let (upstream, counters) = match shared.open(&name, port).await {
        Ok(x) => x,
        Err(why) => return text(StatusCode::FORBIDDEN, format!("{name}:{port}: {why}")),
    };
    let io = TokioIo::new(Counting {
        inner: upstream,
        read: counters,
        read_is_out: false,
    });
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(io).await {
        Ok(x) => x,
        Err(e) => return text(StatusCode::BAD_GATEWAY, format!("{name}:{port}: {e}")),
    };
    tokio::spawn(async move {
        let _slot = slot;
        let _ = conn.await;
    });
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    *req.uri_mut() = match path.parse() {
        Ok(u) => u,
        Err(_) => return text(StatusCode::BAD_REQUEST, "bad path".into()),
    };
    let h = req.headers_mut();
    h.remove("proxy-connection");
    h.remove("proxy-authorization");
    // The Host the upstream sees is the name that was allowed (no fronting
    // another site behind an allowed address with a forged Host header),
    // as it was compared: lowercase, no trailing dot, no user part.
    let host = match auth.port() {
        Some(p) => format!("{name}:{}", p.as_str()),
        None => name.clone(),
    };
    match host.parse() {
        Ok(v) => {
            h.insert(hyper::header::HOST, v);
        }
        Err(_) => return text(StatusCode::BAD_REQUEST, "bad host".into()),
    }
    match sender.send_request(req).await {
        Ok(resp) => resp.map(|b| b.boxed()),
        Err(e) => text(StatusCode::BAD_GATEWAY, format!("{name}:{port}: {e}")),
    }
}

/// Counts bytes each way through a stream. `read_is_out`: the stream is
/// the command's side (what is read from it goes out).
pub(super) struct Counting<T> {
    pub(super) inner: T,
    pub(super) read: Arc<Counters>,
    pub(super) read_is_out: bool,
}

impl<T> Counting<T> {
    fn count(&self, read: bool, n: usize) {
        let c = &self.read;
        let ctr = if read == self.read_is_out {
            &c.out
        } else {
            &c.inn
        };
        ctr.fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counting<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.count(true, n);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counting<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.count(false, n);
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
