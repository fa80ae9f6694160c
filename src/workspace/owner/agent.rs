//! The agent process: drop to the owner's ids, then serve requests on
//! stdin/stdout.

use std::io::{BufReader, BufWriter, Read, Write};

use super::creds::Creds;
use super::local::{read_here, resolve_here};
use super::protocol::{Reply, Request, StreamReader, read_json, send_stream, write_json};
use super::{AGENT_ARG, AccessError};
use crate::workspace::apply::{ApplyError, LocalWorkspace};

/// Drop to the given ids for good: groups, gid, uid (the kernel clears every
/// capability when a process with uid 0 takes non-zero uids), then
/// `no_new_privs` and the parent-death signal (which a credential change
/// resets, so it is armed after).
pub(super) fn drop_to(uid: u32, gid: u32, groups: &[u32], in_view: bool) -> Result<(), String> {
    use nix::unistd::{Gid, Uid};
    if uid == 0 && !in_view {
        return Err("refusing to act as uid 0 through the agent".into());
    }
    let groups: Vec<Gid> = groups.iter().map(|g| Gid::from_raw(*g)).collect();
    nix::unistd::setgroups(&groups).map_err(|e| format!("setgroups: {e}"))?;
    let g = Gid::from_raw(gid);
    nix::unistd::setresgid(g, g, g).map_err(|e| format!("setresgid: {e}"))?;
    let u = Uid::from_raw(uid);
    nix::unistd::setresuid(u, u, u).map_err(|e| format!("setresuid: {e}"))?;
    if uid == 0 {
        // Root's workspace in a client's view: uid 0 without a single
        // capability (the bounding set first, which takes CAP_SETPCAP),
        // so the kernel's checks are those of an owner, not an override.
        caps::clear(None, caps::CapSet::Bounding)
            .map_err(|e| format!("dropping the bounding set: {e}"))?;
        caps::clear(None, caps::CapSet::Ambient).map_err(|e| format!("ambient: {e}"))?;
        caps::clear(None, caps::CapSet::Inheritable).map_err(|e| format!("inheritable: {e}"))?;
        caps::clear(None, caps::CapSet::Effective).map_err(|e| format!("effective: {e}"))?;
        caps::clear(None, caps::CapSet::Permitted).map_err(|e| format!("permitted: {e}"))?;
    }
    for set in [
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
        caps::CapSet::Inheritable,
        caps::CapSet::Ambient,
    ] {
        let held = caps::read(None, set).map_err(|e| format!("reading capabilities: {e}"))?;
        if !held.is_empty() {
            return Err(format!("still holds capabilities {held:?} after the drop"));
        }
    }
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(|e| format!("pdeathsig: {e}"))?;
    if nix::unistd::getppid().as_raw() == 1 {
        return Err("the parent is gone".into());
    }
    Ok(())
}

/// The suffix of a forked agent's argument when it runs in a client's
/// view (its root and mount namespace are the client's).
pub(super) const IN_VIEW: &str = " view";

/// `UID GID G1,G2,...`: the agent's ids.
fn parse_ids(args: &[&str]) -> Option<(u32, u32, Vec<u32>)> {
    let uid = args.first()?.parse().ok()?;
    let gid = args.get(1)?.parse().ok()?;
    let groups = args
        .get(2)?
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect::<Option<Vec<u32>>>()?;
    Some((uid, gid, groups))
}

/// The agent's ids as [`parse_ids`] reads them: `UID`, `GID`, `G1,G2,...`.
/// An executed agent takes them as three arguments; one the resident
/// helper forks ([`run_forked_workspace_agent`]) as one, joined by spaces.
pub(super) fn ids_args(creds: &Creds) -> [String; 3] {
    let groups: Vec<String> = creds.groups.iter().map(|g| g.to_string()).collect();
    [
        creds.uid.to_string(),
        creds.gid.to_string(),
        groups.join(","),
    ]
}

/// Entry point of `dryrun __workspace-agent UID GID G1,G2,...`; called from
/// `main` before anything else.
pub fn run_workspace_agent() -> ! {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    serve_agent(parse_ids(&args), false)
}

/// The same agent, forked by the resident sandbox helper instead of
/// executed: its argument is [`ids_args`] joined by spaces, its input and output are fds 0
/// and 1, and it drops to those ids before it reads a request.
pub fn run_forked_workspace_agent(arg: &[u8]) -> ! {
    let arg = std::str::from_utf8(arg).unwrap_or("");
    let (arg, in_view) = match arg.strip_suffix(IN_VIEW) {
        Some(a) => (a, true),
        None => (arg, false),
    };
    let args: Vec<&str> = arg.split(' ').collect();
    serve_agent(parse_ids(&args), in_view)
}

fn serve_agent(ids: Option<(u32, u32, Vec<u32>)>, in_view: bool) -> ! {
    let Some((uid, gid, groups)) = ids else {
        eprintln!("dryrun: {AGENT_ARG} is internal (usage: UID GID GROUPS)");
        std::process::exit(2);
    };
    if let Err(e) = drop_to(uid, gid, &groups, in_view) {
        eprintln!("dryrun workspace agent: {e}");
        std::process::exit(125);
    }
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut from = BufReader::new(stdin.lock());
    let mut to = BufWriter::new(stdout.lock());
    let mut ws: Option<LocalWorkspace> = None;
    loop {
        let req: Request = match read_json(&mut from) {
            Ok(r) => r,
            Err(_) => std::process::exit(0),
        };
        if serve_one(req, &mut ws, &mut from, &mut to, uid)
            .and_then(|_| to.flush())
            .is_err()
        {
            std::process::exit(1);
        }
    }
}

pub(super) fn serve_one(
    req: Request,
    ws: &mut Option<LocalWorkspace>,
    from: &mut dyn Read,
    to: &mut dyn Write,
    uid: u32,
) -> std::io::Result<()> {
    let rel_of = |h: &str| hex::decode(h).unwrap_or_default();
    let apply_reply = |r: Result<(), ApplyError>| match r {
        Ok(()) => Reply::Ok,
        Err(e) => apply_error_reply(e),
    };
    if let Request::Resolve { path } = &req {
        let reply = match resolve_here(path) {
            Ok(resolved) => Reply::Resolved { resolved },
            Err(error) => Reply::AccessError { error },
        };
        return write_json(to, &reply);
    }
    if let Request::Open {
        path,
        identity,
        max_file,
    } = &req
    {
        let reply = match LocalWorkspace::open(path, identity, *max_file) {
            Ok(w) => {
                *ws = Some(w);
                Reply::Ok
            }
            Err(e) => apply_error_reply(e),
        };
        return write_json(to, &reply);
    }
    let Some(w) = ws.as_ref() else {
        if let Request::WriteFile { .. } = req {
            StreamReader::new(from).drain()?;
        }
        return write_json(
            to,
            &Reply::AccessError {
                error: AccessError::Agent {
                    uid,
                    message: "no workspace is open".into(),
                },
            },
        );
    };
    let reply = match req {
        Request::Resolve { .. } | Request::Open { .. } => unreachable!("handled above"),
        Request::Read { rel_hex, max } => match read_here(w, &rel_of(&rel_hex), max) {
            Ok(None) => Reply::Absent,
            Ok(Some(bytes)) => {
                write_json(to, &Reply::Data)?;
                return send_stream(to, &mut bytes.as_slice());
            }
            Err(error) => Reply::AccessError { error },
        },
        Request::State { rel_hex } => match w.state(&rel_of(&rel_hex)) {
            Ok(state) => Reply::State { state },
            Err(e) => apply_error_reply(e),
        },
        Request::BackupFile { rel_hex } => {
            let rel = rel_of(&rel_hex);
            match w.open_regular_for_backup(&rel) {
                Ok((mut f, mut backup)) => {
                    write_json(to, &Reply::Data)?;
                    send_stream(to, &mut f)?;
                    backup.hash = String::new();
                    Reply::Backup { backup }
                }
                Err(e) => apply_error_reply(e),
            }
        }
        Request::BackupSymlink { rel_hex } => match w.backup_symlink(&rel_of(&rel_hex)) {
            Ok(backup) => Reply::Backup { backup },
            Err(e) => apply_error_reply(e),
        },
        Request::WriteFile {
            rel_hex,
            hash,
            mode,
            tag,
        } => {
            let mut s = StreamReader::new(from);
            let r = w.write_file(&rel_of(&rel_hex), &mut s, &hash, mode, w.owner(), &tag);
            s.drain()?;
            apply_reply(r)
        }
        Request::MakeDir { rel_hex, mode } => {
            apply_reply(w.make_dir(&rel_of(&rel_hex), mode, w.owner()))
        }
        Request::Symlink {
            rel_hex,
            target_hex,
            tag,
        } => apply_reply(w.symlink(&rel_of(&rel_hex), &rel_of(&target_hex), w.owner(), &tag)),
        Request::Remove { rel_hex } => apply_reply(w.remove(&rel_of(&rel_hex))),
        Request::Chmod { rel_hex, mode } => apply_reply(w.chmod(&rel_of(&rel_hex), mode)),
        Request::SetTime { rel_hex, mtime_ns } => {
            apply_reply(w.set_mtime(&rel_of(&rel_hex), mtime_ns))
        }
        Request::Sync => apply_reply(w.sync().map(|_| ())),
    };
    write_json(to, &reply)
}

pub(super) fn apply_error_reply(e: ApplyError) -> Reply {
    match e {
        ApplyError::Path { path, message } => Reply::ApplyError { path, message },
        other => Reply::ApplyError {
            path: String::new(),
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ways of handing the ids over read back as the same ids: the
    /// three arguments of an exec, and the one argument of a fork split
    /// as [`run_forked_workspace_agent`] splits it (groups or none).
    #[test]
    fn ids_args_read_back_as_given_executed_or_forked() {
        for groups in [vec![], vec![1000], vec![4, 27, 1000]] {
            let creds = Creds {
                uid: 1000,
                gid: 1000,
                groups: groups.clone(),
            };
            let args = ids_args(&creds);
            let executed: Vec<&str> = args.iter().map(String::as_str).collect();
            let joined = args.join(" ");
            let forked: Vec<&str> = joined.split(' ').collect();
            let want = Some((1000, 1000, groups));
            assert_eq!(parse_ids(&executed), want);
            assert_eq!(parse_ids(&forked), want);
        }
    }
}
