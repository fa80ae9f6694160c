//! TLS to the fleet store where the connection string asks for it
//! (docs/fleet.md): with `sslmode=require` the server's certificate is
//! verified (against the fleet config's `tls_ca_file`, or `PGSSLROOTCERT`
//! for a command-line client); a server whose certificate is signed by no
//! trusted authority is refused, and a store that only takes TLS refuses
//! a connection in the clear.

mod common;

use std::path::Path;
use std::process::Command;

use common::daemon::*;
use common::fleet::*;
use common::pg::*;
use common::*;

/// A certificate authority and a server certificate for 127.0.0.1 it
/// signed, made with `openssl` in `dir`: (ca.pem, server.crt, server.key).
fn certificates(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=dryrun test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(dir.join("ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext",
        "-out",
        "server.crt",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("server.crt"),
        dir.join("server.key"),
    )
}

#[test]
fn a_store_asked_for_over_tls_is_verified_and_never_reached_in_the_clear() {
    if !require_root() || !require_postgres() || !require_tool("openssl", "openssl") {
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    let (ca, crt, key) = certificates(certs.path());
    let pg = Pg::start_with(None, Some((&crt, &key)));
    pg.add_role("host_a", "dryrun_host");
    pg.add_role("bob", "dryrun_reviewer");
    let cfg_dir = tempfile::tempdir().unwrap();
    let people = format!("{PEOPLE}tls_ca_file: {}\n", ca.display());
    let cfg = host_config(cfg_dir.path(), "host_a", &people);
    let cfg_text = std::fs::read_to_string(&cfg).unwrap();
    // (`people:` is last in what host_config writes: put the CA before it.)
    let cfg_text = cfg_text.replace(&format!("tls_ca_file: {}\n", ca.display()), "");
    std::fs::write(&cfg, format!("tls_ca_file: {}\n{cfg_text}", ca.display())).unwrap();
    let url = format!(
        "{}?sslmode=require",
        pg.url_no_password("host_a", "127.0.0.1")
    );
    // The host, trusting the CA: registers over TLS.
    let _a = Daemon::start(&["--fleet", &url, "--fleet-config", cfg.to_str().unwrap()]);
    assert_eq!(
        pg.psql("dryrun", "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename = 'host_a' AND s.ssl"),
        "1"
    );
    let client = |url: &str, ca: Option<&Path>| {
        let mut c = Command::new(bin());
        c.env_clear().env("PATH", "/usr/bin:/bin");
        if let Some(ca) = ca {
            c.env("PGSSLROOTCERT", ca);
        }
        c.args(["fleet", "--fleet", url, "hosts", "--json"])
            .output()
            .unwrap()
    };
    let bob = format!("{}?sslmode=require", pg.role_url("bob"));
    let ok = client(&bob, Some(&ca));
    assert!(ok.status.success(), "{}", text(&ok));
    assert!(text(&ok).contains("host_a"), "{}", text(&ok));
    // Without the CA: the certificate is not trusted, nothing is sent.
    let untrusted = client(&bob, None);
    assert_eq!(untrusted.status.code(), Some(1), "{}", text(&untrusted));
    assert!(
        text(&untrusted).to_lowercase().contains("certificate"),
        "{}",
        text(&untrusted)
    );
    // In the clear: the store refuses (a refusal: exit 4).
    let clear = client(
        &format!("{}?sslmode=disable", pg.role_url("bob")),
        Some(&ca),
    );
    assert_eq!(clear.status.code(), Some(4), "{}", text(&clear));
    assert!(
        text(&clear).contains("no encryption") || text(&clear).contains("pg_hba"),
        "{}",
        text(&clear)
    );
}
