//! The connection to the fleet store: TLS when the connection string asks
//! (`sslmode=require`: the server's certificate is verified against the
//! system's roots and the config's `tls_ca_file`; `prefer` tries TLS
//! first), notifications (`LISTEN`) delivered on a channel, and the
//! schema's migrations (`migrations/`), applied by `dryrun fleet migrate`.

use std::str::FromStr;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::config::SslMode;
use tokio_postgres::{AsyncMessage, Client, Notification};

use super::FleetError;
use super::config::FleetSpec;

/// The schema's migrations, in order: (version, SQL).
pub const MIGRATIONS: &[(i32, &str)] = &[(1, include_str!("../../migrations/0001_fleet.sql"))];

/// The schema version this binary needs.
pub fn schema_version_needed() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}

/// An open connection and its notifications.
pub struct Db {
    pub client: Client,
    /// `None` once the connection is gone.
    pub notes: mpsc::UnboundedReceiver<Notification>,
}

/// Connect as the spec says; notifications (and the end of the
/// connection: the channel closes) arrive on [`Db::notes`].
pub async fn connect(spec: &FleetSpec) -> Result<Db, FleetError> {
    let mut cfg = tokio_postgres::Config::from_str(&spec.url)
        .map_err(|e| FleetError::Config(format!("the fleet connection string: {e}")))?;
    if cfg.get_password().is_none()
        && let Some(p) = &spec.password
    {
        cfg.password(p.as_bytes());
    }
    if cfg.get_application_name().is_none() {
        cfg.application_name("dryrun");
    }
    cfg.connect_timeout(std::time::Duration::from_secs(5));
    let (tx, rx) = mpsc::unbounded_channel();
    // A Unix socket is a local connection: the server takes no TLS on it
    // (it answers a TLS request with "no"), so `prefer` means the clear
    // and `require` cannot be met.
    let only_unix = !cfg.get_hosts().is_empty()
        && cfg
            .get_hosts()
            .iter()
            .all(|h| matches!(h, tokio_postgres::config::Host::Unix(_)));
    let mode = match cfg.get_ssl_mode() {
        SslMode::Require if only_unix => {
            return Err(FleetError::Config(
                "the fleet connection string asks for sslmode=require over a Unix socket, which carries no TLS; use a TCP host or sslmode=disable".into(),
            ));
        }
        _ if only_unix => SslMode::Disable,
        m => m,
    };
    let client = match mode {
        SslMode::Disable => {
            let (client, conn) = cfg.connect(tokio_postgres::NoTls).await?;
            drive(conn, tx);
            client
        }
        _ => {
            let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(spec)?);
            let (client, conn) = cfg.connect(tls).await?;
            drive(conn, tx);
            client
        }
    };
    Ok(Db { client, notes: rx })
}

/// The TLS client's trust: the system's roots and the config's
/// `tls_ca_file`, verified by rustls (no C library: the binary links no
/// OpenSSL). A system root that does not parse is skipped, as every TLS
/// client does; a `tls_ca_file` that holds no certificate is an error.
fn tls_config(spec: &FleetSpec) -> Result<rustls::ClientConfig, FleetError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(pem) = &spec.tls_ca {
        let mut n = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| FleetError::Config(format!("tls_ca_file: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| FleetError::Config(format!("tls_ca_file: {e}")))?;
            n += 1;
        }
        if n == 0 {
            return Err(FleetError::Config(
                "tls_ca_file: no PEM certificate in it".into(),
            ));
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| FleetError::Config(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Poll the connection on its own task, handing notifications on.
fn drive<S, T>(mut conn: tokio_postgres::Connection<S, T>, tx: mpsc::UnboundedSender<Notification>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(m) = messages.next().await {
            match m {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(n).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("fleet store connection: {e}");
                    return;
                }
            }
        }
    });
}

/// The schema version the store has (0: none).
pub async fn schema_version<C: tokio_postgres::GenericClient>(
    client: &C,
) -> Result<i32, FleetError> {
    let exists: Option<String> = client
        .query_one("SELECT to_regclass('dryrun.schema_version')::text", &[])
        .await?
        .get(0);
    if exists.is_none() {
        return Ok(0);
    }
    let v: Option<i32> = client
        .query_one("SELECT max(version) FROM dryrun.schema_version", &[])
        .await?
        .get(0);
    Ok(v.unwrap_or(0))
}

/// Apply the migrations the store lacks, in one transaction (others
/// migrating at once wait on an advisory lock). Returns (from, to).
pub async fn migrate(client: &mut Client) -> Result<(i32, i32), FleetError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock(7260557163)", &[])
        .await?;
    let from = schema_version(&tx).await?;
    let mut to = from;
    for (v, sql) in MIGRATIONS {
        if *v <= from {
            continue;
        }
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO dryrun.schema_version (version) VALUES ($1)",
            &[v],
        )
        .await?;
        to = *v;
    }
    tx.commit().await?;
    Ok((from, to))
}

/// Refuse a store whose schema is not the one this binary speaks.
pub async fn check_schema(client: &Client) -> Result<(), FleetError> {
    let have = schema_version(client).await?;
    let need = schema_version_needed();
    if have != need {
        return Err(FleetError::Schema { have, need });
    }
    Ok(())
}
