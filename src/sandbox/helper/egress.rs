//! The sandbox's side of egress, in every rehearsal (`spec.egress` set;
//! only the live lane's rerun on the host's network has none):
//!
//! - H1 connects to the engine's proxy control socket (a path only the
//!   engine's uid can reach); C and P1 inherit the connection.
//! - P3 points the image's `/etc/resolv.conf` at the sandbox's own DNS
//!   responder (a read-only bind of a generated file).
//! - P7, once loopback is up, creates the DNS responder's UDP socket
//!   (`127.0.0.1:53`) and the proxy's listening TCP socket
//!   (`127.0.0.1:proxy_port`) inside the sandbox's
//!   network namespace and hands them to the engine over the control
//!   connection (`SCM_RIGHTS`), then closes its copies. The engine serves
//!   them; no process of the sandbox forwards anything, and the namespace
//!   still has only loopback.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Mutex;

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};

use super::super::mounts;
use super::super::spec::SandboxSpec;
use super::error::HelperError;
use crate::model::egress::{RELEASE_GO, RELEASE_STOP};

/// The control connection, from H1 until P7 hands the sockets over. A
/// process-wide slot because it crosses two forks (H → C → P1), which copy
/// it; it is never touched by more than one thread.
static CONTROL: Mutex<Option<OwnedFd>> = Mutex::new(None);

/// The loopback address the DNS responder answers on.
pub(crate) const DNS_ADDR: &str = "127.0.0.1:53";

/// H1: connect to the proxy's control socket (fail closed: no proxy, no run).
pub(super) fn connect_control(spec: &SandboxSpec) -> Result<(), HelperError> {
    let Some(plan) = &spec.egress else {
        return Ok(());
    };
    let s = UnixStream::connect(&plan.control).map_err(|e| HelperError::TakeOver {
        op: "egress proxy",
        source: io::Error::new(
            e.kind(),
            format!(
                "cannot reach the run's egress proxy at {}: {e}",
                plan.control.display()
            ),
        ),
    })?;
    if let Ok(mut slot) = CONTROL.lock() {
        *slot = Some(OwnedFd::from(s));
    }
    Ok(())
}

/// P3: `/etc/resolv.conf` in the new root names the sandbox's responder.
/// `scratch` is P1's own tmpfs, where the generated file lives.
pub(super) fn point_resolver_at_sandbox(
    spec: &SandboxSpec,
    root: &Path,
    scratch: &Path,
) -> Result<(), HelperError> {
    if spec.egress.is_none() {
        return Ok(());
    }
    let step = |op| {
        move |e: mounts::MountError| HelperError::ImageRoot {
            op,
            source: e.into(),
        }
    };
    let file = scratch.join("resolv.conf");
    std::fs::write(
        &file,
        "# dryrun: the rehearsal's own DNS responder (records names, answers nothing real)\nnameserver 127.0.0.1\noptions attempts:1 timeout:2\n",
    )
    .map_err(|e| HelperError::ImageRoot {
        op: "resolv.conf",
        source: super::error::FsError::io(&file)(e),
    })?;
    let conf = Path::new("/etc/resolv.conf");
    let sealed = mounts::Sealed::seal(&file).map_err(step("resolv.conf"))?;
    if !mounts::mask_path(root, conf, &sealed).map_err(step("resolv.conf"))? {
        // No regular file there (absent, or a link into a tree the image
        // does not show): make one where the lookup will land.
        let target = root.join("etc/resolv.conf");
        if let Ok(link) = std::fs::read_link(&target) {
            let dest = if link.is_absolute() {
                root.join(link.strip_prefix("/").unwrap_or(&link))
            } else {
                root.join("etc").join(link)
            };
            if let Some(parent) = dest.parent()
                && std::fs::create_dir_all(parent).is_ok()
            {
                let _ = std::fs::copy(&file, &dest);
            }
        }
    }
    Ok(())
}

/// P7: the DNS socket and the proxy's listener,
/// created in the sandbox's network namespace and handed to the engine:
/// the listener first, as the engine expects; then the declared services'
/// listeners (`services.rs`).
pub(super) fn hand_sockets_to_proxy(spec: &SandboxSpec) -> Result<(), HelperError> {
    let Some(plan) = &spec.egress else {
        return Ok(());
    };
    let prep = |op| move |e: io::Error| HelperError::Prepare { op, source: e };
    let control = CONTROL
        .lock()
        .ok()
        .and_then(|mut s| s.take())
        .ok_or_else(|| prep("egress sockets")(io::Error::other("no control connection")))?;
    let tcp = plan
        .proxy_port
        .map(|port| std::net::TcpListener::bind(("127.0.0.1", port)))
        .transpose()
        .map_err(prep("egress proxy listener"))?;
    let udp = std::net::UdpSocket::bind(DNS_ADDR).map_err(prep("egress dns socket"))?;
    let services = super::services::listeners(spec)?;
    let fds: Vec<_> = tcp
        .iter()
        .map(|t| t.as_raw_fd())
        .chain([udp.as_raw_fd()])
        .chain(services.iter().map(|s| s.as_raw_fd()))
        .collect();
    let cmsg = [ControlMessage::ScmRights(&fds)];
    sendmsg::<()>(
        control.as_raw_fd(),
        &[IoSlice::new(b"S")],
        &cmsg,
        MsgFlags::empty(),
        None,
    )
    .map_err(|e| prep("egress sockets")(e.into()))?;
    // Kept for the release (`await_release`), which comes later: the
    // proxy answers once the run's submission is on disk.
    if let Ok(mut slot) = CONTROL.lock() {
        *slot = Some(control);
    }
    Ok(())
}

/// Just before the command's first fork: wait for the engine's word that
/// the run's submission is on disk (one byte on the control connection).
/// Anything but the go (the stop, the connection closed, an error) fails
/// the run closed, and the command never starts.
pub(super) fn await_release(spec: &SandboxSpec) -> Result<(), HelperError> {
    if spec.egress.is_none() {
        return Ok(());
    }
    let fail = |why: String| HelperError::Prepare {
        op: "command release",
        source: io::Error::other(why),
    };
    let control = CONTROL
        .lock()
        .ok()
        .and_then(|mut s| s.take())
        .ok_or_else(|| fail("no control connection".into()))?;
    let mut byte = [0u8; 1];
    let read = loop {
        match nix::unistd::read(&control, &mut byte) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => break r,
        }
    };
    match read {
        Ok(1) if byte[0] == RELEASE_GO => Ok(()),
        Ok(1) if byte[0] == RELEASE_STOP => Err(fail(
            "the run's submission did not reach the journal, so the command was not started".into(),
        )),
        Ok(0) => Err(fail(
            "the engine closed the control connection before releasing the command".into(),
        )),
        Ok(_) => Err(fail("the engine's release was not understood".into())),
        Err(e) => Err(fail(format!("waiting for the engine's release: {e}"))),
    }
}
