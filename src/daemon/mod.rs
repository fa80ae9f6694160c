//! `dryrun daemon`: HTTP/1.1 + JSON on a Unix socket. The API
//! layer only parses (method + path + body → a typed call into the
//! [`Engine`]); every stage lives in the engine, as for the CLI.
//!
//! Lifecycle, in order:
//! 1. open the engine on the state directory; this settles what a previous
//!    daemon left in flight (runs → `failed`, journaled; scratch removed;
//!    stale cgroups swept);
//! 2. take the listening socket: a systemd socket-activation fd when one is
//!    passed (`LISTEN_FDS`), else bind `--socket` after taking an exclusive
//!    lock on `<socket>.lock` (so a stale socket file is replaced only when
//!    no other daemon is serving it), mode 0660, group `--socket-group`;
//! 3. serve; rehearsals run at most `--max-running` at once, with at most
//!    `--max-queued` waiting; beyond that, 429 with `Retry-After`;
//! 4. on SIGTERM/SIGINT: stop accepting, fail queued runs, give running
//!    rehearsals `--shutdown-grace` seconds, cancel the rest, remove the
//!    socket.

mod api;
mod app;
mod call;
mod error;
mod metrics;
mod notify;
mod peer_ns;
pub use crate::request::routes;
pub use crate::request::transport::{SYSTEM_SOCKET, default_socket, user_socket};

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use crate::request::{HostPromptGrant, PromoteBody, ReviewBody, RunList, Submitted};
pub use api::{Health, ROUTES};
pub use error::{ErrorBody, ErrorDetail, engine_status};

use crate::engine::{Engine, EngineOptions};

#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    /// Group that may connect (socket mode 0660); default: the daemon's own.
    pub socket_group: Option<String>,
    /// Members (and root) may approve and reject.
    pub approver_group: String,
    pub max_running: usize,
    pub max_queued: usize,
    pub max_body_bytes: usize,
    pub shutdown_grace: Duration,
    pub budget: Option<crate::policy::budget::BudgetConfig>,
    pub allow_degraded: bool,
    /// The most one run may ask for; above it, 400 and nothing runs.
    pub ceilings: crate::envelope::LimitsSpec,
    /// Per-uid quota and retention of the state directory.
    pub retention: crate::engine::Retention,
    /// Whether an agent host's prompt may approve runs (off by default).
    pub host_prompt_approvals: bool,
    /// `--egress-resolve` pins for every run's egress proxy.
    pub egress_resolve: Vec<crate::egress::ResolvePin>,
    /// How long a run waits for a person before it expires.
    pub approval_expiry: Duration,
    /// Run when a run starts waiting for a person (see `notify.rs`).
    pub notify: Option<notify::NotifyConfig>,
    /// Part of a fleet (`--fleet URL`, docs/fleet.md); `None`: nothing
    /// changes.
    pub fleet: Option<crate::fleet::FleetSpec>,
}

impl DaemonConfig {
    pub fn new(socket: PathBuf, state_dir: PathBuf) -> Self {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        DaemonConfig {
            socket,
            state_dir,
            socket_group: None,
            approver_group: "dryrun-approvers".into(),
            // Fitted by benches/daemon.sh (8 clients, `true`, 2 cores):
            // 1× cores left the CPU idle while runs waited on fsync and
            // namespace tear-down (51-57 rehearsals/s); 2× gave 75-83/s;
            // 4× no more (76-88/s) with a worse p99.
            max_running: cores * 2,
            max_queued: 64,
            max_body_bytes: 1 << 20,
            shutdown_grace: Duration::from_secs(30),
            budget: Some(Default::default()),
            allow_degraded: false,
            ceilings: crate::engine::machine::Machine::this().default_ceilings(),
            retention: crate::engine::Retention::default(),
            host_prompt_approvals: false,
            egress_resolve: Vec::new(),
            approval_expiry: crate::engine::DEFAULT_APPROVAL_EXPIRY,
            notify: None,
            fleet: None,
        }
    }
}

pub use notify::{NOTIFY_QUEUE_DEFAULT, NotifyConfig};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("socket {path}: {message}")]
    Socket { path: PathBuf, message: String },
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("group {0:?} does not exist; create it or pass another --socket-group")]
    NoSuchGroup(String),
    #[error(
        "the journal {path} is damaged at line {line}: {problem}. The daemon will not append to a broken chain. \
         Keep the file as evidence: move journal.jsonl and journal.head aside to start a new chain"
    )]
    JournalDamaged {
        path: String,
        line: u64,
        problem: String,
    },
    #[error(
        "the journal {path} cannot be vouched for: {problem}. The daemon will not append to it"
    )]
    JournalAnchorDamaged { path: String, problem: String },
    #[error(transparent)]
    Fleet(#[from] crate::fleet::FleetError),
}

/// The listening socket and, when we bound it ourselves, its lock.
struct Listening {
    listener: tokio::net::UnixListener,
    /// Held for the daemon's lifetime; `None` under socket activation.
    _lock: Option<nix::fcntl::Flock<std::fs::File>>,
    /// Removed at shutdown when we created it.
    owned_path: Option<PathBuf>,
    /// The lock's path, removed at a clean stop while the lock is still held.
    lock_path: Option<PathBuf>,
    /// Who can connect, in words, for the start line.
    reach: String,
}

fn socket_err(path: &Path, message: impl std::fmt::Display) -> DaemonError {
    DaemonError::Socket {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

fn take_listener(cfg: &DaemonConfig) -> Result<Listening, DaemonError> {
    // systemd socket activation: LISTEN_PID/LISTEN_FDS name fd 3.
    let mut fds = listenfd::ListenFd::from_env();
    if fds.len() > 0 {
        let std_l = fds
            .take_unix_listener(0)
            .map_err(|e| socket_err(&cfg.socket, format!("socket-activation fd 3: {e}")))?
            .ok_or_else(|| {
                socket_err(
                    &cfg.socket,
                    "LISTEN_FDS is set but fd 3 is not a listening Unix socket",
                )
            })?;
        std_l
            .set_nonblocking(true)
            .map_err(|e| socket_err(&cfg.socket, e))?;
        let listener =
            tokio::net::UnixListener::from_std(std_l).map_err(|e| socket_err(&cfg.socket, e))?;
        tracing::info!("serving on the socket passed by systemd");
        return Ok(Listening {
            listener,
            _lock: None,
            owned_path: None,
            lock_path: None,
            reach: "the socket passed by systemd (its unit's owner, group and mode decide who may connect)".into(),
        });
    }

    let path = &cfg.socket;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| socket_err(path, "give an absolute socket path"))?;
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|e| socket_err(path, e))?;
        // Reachable by the socket's group; the socket's own mode decides.
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    }
    // The socket's directory must be writable by us alone: otherwise another
    // user could swap the socket (or its lock) for a symlink between our
    // calls and have us chmod/chown something else.
    {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(dir).map_err(|e| socket_err(path, e))?;
        let me = nix::unistd::geteuid().as_raw();
        let sticky = m.mode() & 0o1000 != 0;
        if (m.uid() != me && m.uid() != 0) || (m.mode() & 0o022 != 0 && !sticky) {
            return Err(socket_err(
                path,
                format!(
                    "its directory {} is writable by others (mode {:o}, owner {}); put the socket in a directory only the daemon's user can write",
                    dir.display(),
                    m.mode() & 0o7777,
                    m.uid()
                ),
            ));
        }
    }
    let lock_path = {
        let mut p = path.clone().into_os_string();
        p.push(".lock");
        PathBuf::from(p)
    };
    let lock_file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(&lock_path)
    }
    .map_err(|e| socket_err(&lock_path, e))?;
    let lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|_| {
            socket_err(
                path,
                format!(
                    "another dryrun daemon is serving it (it holds {}); stop that one first",
                    lock_path.display()
                ),
            )
        })?;
    // A daemon that stopped cleanly removed the lock file while holding it:
    // a lock taken on such an unlinked file is no lock at all, so the file
    // locked must still be the one at the path.
    {
        use std::os::unix::fs::MetadataExt;
        let held = std::fs::File::metadata(&lock).map_err(|e| socket_err(&lock_path, e))?;
        let at_path = std::fs::symlink_metadata(&lock_path).ok();
        if at_path.is_none_or(|m| (m.dev(), m.ino()) != (held.dev(), held.ino())) {
            return Err(socket_err(
                path,
                format!(
                    "its lock {} was replaced while this daemon started (another daemon stopping or starting); start again",
                    lock_path.display()
                ),
            ));
        }
    }
    // We hold the lock, so whatever socket file is there is stale.
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            use std::os::unix::fs::FileTypeExt;
            if !m.file_type().is_socket() {
                return Err(socket_err(
                    path,
                    "exists and is not a socket; refusing to replace it",
                ));
            }
            std::fs::remove_file(path).map_err(|e| socket_err(path, e))?;
            tracing::info!("replaced a stale socket at {}", path.display());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(socket_err(path, e)),
    }
    let std_l = std::os::unix::net::UnixListener::bind(path).map_err(|e| socket_err(path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .map_err(|e| socket_err(path, e))?;
    let reach = match &cfg.socket_group {
        Some(g) => {
            let grp = nix::unistd::Group::from_name(g)
                .ok()
                .flatten()
                .ok_or_else(|| DaemonError::NoSuchGroup(g.clone()))?;
            nix::unistd::chown(path, None, Some(grp.gid))
                .map_err(|e| socket_err(path, format!("chown to group {g}: {e}")))?;
            format!("its owner and group {g} may connect (mode 0660)")
        }
        None => {
            let me = nix::unistd::User::from_uid(nix::unistd::geteuid())
                .ok()
                .flatten()
                .map_or_else(|| format!("uid {}", nix::unistd::geteuid()), |u| u.name);
            let group = nix::unistd::Group::from_gid(nix::unistd::getegid())
                .ok()
                .flatten()
                .map_or_else(|| format!("gid {}", nix::unistd::getegid()), |g| g.name);
            format!(
                "only {me} and group {group} may connect (mode 0660; no --socket-group: agents running as other users cannot reach it)"
            )
        }
    };
    std_l
        .set_nonblocking(true)
        .map_err(|e| socket_err(path, e))?;
    let listener = tokio::net::UnixListener::from_std(std_l).map_err(|e| socket_err(path, e))?;
    Ok(Listening {
        listener,
        _lock: Some(lock),
        owned_path: Some(path.clone()),
        lock_path: Some(lock_path),
        reach,
    })
}

/// Run the daemon until SIGTERM/SIGINT. Blocks.
pub fn run_daemon(cfg: DaemonConfig) -> Result<(), DaemonError> {
    // Fail closed: verify the whole chain before serving (O(journal), once).
    let report = crate::journal::Journal::new(&cfg.state_dir)
        .verify()
        .map_err(|e| DaemonError::Engine(e.into()))?;
    if let Some(bad) = report.first_bad {
        return Err(DaemonError::JournalDamaged {
            path: report.path,
            line: bad.line,
            problem: bad.problem,
        });
    }
    if report.anchor_damaged {
        return Err(DaemonError::JournalAnchorDamaged {
            path: report.path,
            problem: report.anchor,
        });
    }
    let opts = EngineOptions {
        allow_degraded: cfg.allow_degraded || EngineOptions::default().allow_degraded,
        ceilings: cfg.ceilings,
        ceilings_of: "this daemon's",
        retention: cfg.retention.clone(),
        host_prompt_approvals: cfg.host_prompt_approvals,
        egress: crate::egress::EgressSystem {
            pins: cfg.egress_resolve.clone(),
            ..Default::default()
        },
        approval_expiry: cfg.approval_expiry,
        // Its clients' environment is not the daemon's own.
        caller: crate::engine::CallerEnv::default(),
        ..EngineOptions::default()
    };
    let mut engine = Engine::open(&cfg.state_dir, opts)?;
    // Many runs: in-flight markers are kept for reuse, not made and removed
    // per run.
    engine.keep_idle_markers();
    if let Some(b) = cfg.budget {
        engine.enable_budget(b);
    }
    let recovered = engine.recover_interrupted()?;
    if !recovered.is_empty() {
        tracing::warn!(
            "{} run(s) interrupted by the previous daemon's end marked failed",
            recovered.len()
        );
    }
    // Before the runtime: the resident helper is started by exec from a
    // thread of its own that lives as long as the daemon (its parent-death
    // signal follows the thread that started it).
    match crate::engine::start_resident_sandbox_helper() {
        Ok(()) => {}
        Err(e) => {
            tracing::warn!(error = %e, "no resident sandbox helper; rehearsals start the helper by exec")
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(cfg.max_running.max(1) * 2 + 8)
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    rt.block_on(async move {
        let engine = Arc::new(engine);
        // Part of a fleet: registered, and judging with the fleet policy,
        // before anything is served (or not started at all).
        if let Some(spec) = cfg.fleet.clone() {
            crate::fleet::start(engine.clone(), spec, cfg.state_dir.clone()).await?;
        }
        let listening = take_listener(&cfg)?;
        let app = app::App::new(engine, cfg.clone());
        let router = api::router(app.clone());
        eprintln!(
            "dryrun daemon: serving {}: {} (state {}; {} rehearsals at once, {} queued; approvers: {})",
            cfg.socket.display(),
            listening.reach,
            cfg.state_dir.display(),
            cfg.max_running,
            cfg.max_queued,
            describe_approvers(&cfg.approver_group)
        );
        // Retention applies while the daemon runs, not only at its start.
        let housekeeping_app = app.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(HOUSEKEEPING_EVERY);
            every.tick().await; // the engine's start just did it
            loop {
                every.tick().await;
                housekeeping_app.housekeeping().await;
            }
        });
        // Waiting runs expire while the daemon runs, not only when looked at.
        let expiry_app = app.clone();
        let check_every = (cfg.approval_expiry / 10).clamp(Duration::from_secs(1), HOUSEKEEPING_EVERY / 6);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(check_every);
            loop {
                every.tick().await;
                let engine = expiry_app.engine.clone();
                let _ = tokio::task::spawn_blocking(move || engine.expire_due_runs()).await;
            }
        });
        if let Some(n) = cfg.notify.clone() {
            notify::spawn_notifier(app.engine.clone(), n, app.metrics.clone());
        }
        let signal_app = app.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            signal_app.begin_shutdown();
        });
        // Queued runs fail at once, running ones get the grace period.
        let drain_app = app.clone();
        let grace = cfg.shutdown_grace;
        let drained = tokio::spawn(async move {
            drain_app.shutdown_started().await;
            drain_app.drain(grace).await;
        });
        serve(listening.listener, router, app.clone(), &cfg).await;
        let _ = drained.await;
        app.engine.drop_idle_markers();
        if let Some(p) = &listening.owned_path {
            let _ = std::fs::remove_file(p);
        }
        // Still holding the lock: a daemon starting now either fails to
        // take it or finds the file gone and makes its own.
        if let Some(p) = &listening.lock_path {
            let _ = std::fs::remove_file(p);
        }
        eprintln!("dryrun daemon: stopped");
        Ok(())
    })
}

/// Who may approve, as the group database says now: a group that does not
/// exist is named as such (approval is then root's alone).
fn describe_approvers(group: &str) -> String {
    match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) if g.mem.is_empty() => format!(
            "root and group {group} (no members listed; add reviewers with `usermod -aG {group} NAME`)"
        ),
        Ok(Some(g)) => format!("root and group {group} ({})", g.mem.join(", ")),
        _ => format!(
            "root only: group {group} does not exist (create it with `groupadd --system {group}` and add reviewers, or name another with --approver-group)"
        ),
    }
}

/// How often a running daemon applies the retention (as each start does).
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(3600);

/// Connections at once, in total and per client uid; past either, a new
/// connection gets a 429 (`too_many_connections[_per_uid]`) and is closed.
const MAX_CONNECTIONS: usize = 512;
const MAX_CONNECTIONS_PER_UID: usize = 64;
/// A client must send a request's head within this time (also bounds idle
/// keep-alive connections); bodies have the same limit in the handlers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The accept loop: peer credentials at accept, connection caps, header
/// timeouts, and a bounded graceful shutdown.
async fn serve(
    listener: tokio::net::UnixListener,
    router: axum::Router,
    app: Arc<app::App>,
    cfg: &DaemonConfig,
) {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use tower::ServiceExt;

    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let total = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let per_uid: Arc<Mutex<HashMap<u32, usize>>> = Arc::new(Mutex::new(HashMap::new()));
    let refusals = Arc::new(tokio::sync::Semaphore::new(MAX_REFUSALS_IN_FLIGHT));
    let stop = app.clone();
    let stopping = stop.shutdown_started();
    tokio::pin!(stopping);
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stopping => break,
        };
        let peer = app::Peer::from_stream(&stream);
        let peer_uid = peer.uid;
        let Ok(permit) = total.clone().try_acquire_owned() else {
            app.refuse_connection("too_many_connections");
            refuse_with_429(stream, "too_many_connections", &refusals);
            continue;
        };
        {
            let mut m = per_uid.lock().unwrap_or_else(|p| p.into_inner());
            let n = m.entry(peer_uid).or_insert(0);
            if *n >= MAX_CONNECTIONS_PER_UID {
                drop(m);
                app.refuse_connection("too_many_connections_per_uid");
                refuse_with_429(stream, "too_many_connections_per_uid", &refusals);
                continue;
            }
            *n += 1;
        }
        let router = router.clone();
        let svc = tower::service_fn(move |mut req: axum::http::Request<hyper::body::Incoming>| {
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer.clone()));
            router.clone().oneshot(req.map(axum::body::Body::new))
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .max_buf_size(64 * 1024)
            .serve_connection(
                hyper_util::rt::TokioIo::new(stream),
                hyper_util::service::TowerToHyperService::new(svc),
            );
        let watched = graceful.watch(conn);
        let per_uid = per_uid.clone();
        tokio::spawn(async move {
            let _ = watched.await;
            drop(permit);
            let mut m = per_uid.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = m.get_mut(&peer_uid) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&peer_uid);
                }
            }
        });
    }
    drop(listener);
    // In-flight requests finish (a waiting submission ends when its run is
    // settled by the drain); past the grace period plus a margin, stop anyway.
    let deadline = cfg.shutdown_grace + Duration::from_secs(5);
    if tokio::time::timeout(deadline, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open {deadline:?} after shutdown began; closing them");
    }
}

/// Refused connections still get an answer a client can act on (429 with
/// Retry-After and the JSON error body), written by a short-lived task; past
/// this many such tasks at once, the connection is just closed.
const MAX_REFUSALS_IN_FLIGHT: usize = 256;

fn refuse_with_429(
    mut stream: tokio::net::UnixStream,
    code: &'static str,
    refusals: &Arc<tokio::sync::Semaphore>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(permit) = refusals.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        let _ = tokio::time::timeout(Duration::from_secs(2), async move {
            // Read the request head first: closing a Unix socket with unread
            // data makes the peer's read fail with ECONNRESET.
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while head.len() < 64 * 1024 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let body = format!(
                r#"{{"error":{{"code":"{code}","message":"too many open connections; close idle ones and retry"}}}}"#
            );
            let resp = format!(
                "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(resp.as_bytes()).await;
            let _ = stream.shutdown().await;
            // Drain a body the client may still be sending (same reason).
            let _ = tokio::time::timeout(Duration::from_millis(500), async {
                while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
            })
            .await;
        })
        .await;
    });
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
