//! Registry presets: an allowlist entry `npm`, `pypi`, `crates` or
//! `goproxy` stands for the hosts of the registry that tool uses *for the
//! user the command runs as*, read from the tool's own configuration on
//! this machine, never from a list written here:
//!
//! - `npm`: `npm config get registry`, run as that user in the workspace
//!   (so the user's and the project's npmrc files, `npm_config_registry`
//!   and npm's compiled-in default all count, in npm's own order);
//! - `pypi`: pip's `index-url` and `extra-index-url` (`PIP_INDEX_URL`,
//!   `PIP_EXTRA_INDEX_URL`, the pip.conf files pip reads), else pip's
//!   compiled-in index and its file host, read from pip itself
//!   (`python3 -c ...` as that user);
//! - `crates`: a source replacement of the default registry in the user's
//!   or the project's `.cargo/config.toml` (`[source.crates-io]
//!   replace-with`, then that source's `registry` or `[registries.NAME]
//!   index`). Cargo's own default cannot be read from cargo without a
//!   network call (its download host is in the index's `config.json`), so
//!   without a replacement the preset is refused unless the system policy
//!   names its hosts;
//! - `goproxy`: `go env GOPROXY` (or the variable), its URLs' hosts.
//!
//! A system policy's `egress.presets: {NAME: [hosts]}` wins over all of
//! this (and is the only source trusted beyond the ceiling: the system
//! wrote it). What a user's configuration yields is an ordinary allowlist
//! entry and meets `egress.ceiling` like any other.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::HostPattern;

/// The preset names an allowlist may use.
pub const PRESETS: [&str; 4] = ["npm", "pypi", "crates", "goproxy"];

/// How long a tool may take to say its configuration.
const TOOL_DEADLINE: Duration = Duration::from_secs(15);
/// Most bytes of a tool's answer read.
const MAX_ANSWER: u64 = 64 * 1024;

/// Whether an allowlist entry names a preset.
pub fn is_preset(entry: &str) -> bool {
    PRESETS.contains(&entry.trim())
}

/// A preset's hosts and where they came from, or why not.
pub(crate) type Resolved = Result<(Vec<HostPattern>, String), String>;
/// How the engine reads a preset for the run's user.
pub(crate) type Resolver<'a> = dyn Fn(&str) -> Resolved + 'a;

/// Who the preset is read for: the user the command runs as, its
/// environment and the workspace.
pub(crate) struct Caller<'a> {
    pub uid: u32,
    pub gid: u32,
    pub env: &'a [(String, String)],
    pub workspace: &'a Path,
}

/// The hosts of preset `name` for `caller`, with where they came from.
pub(crate) fn resolve(name: &str, caller: &Caller) -> Resolved {
    match name {
        "npm" => {
            let out = run_as(caller, "npm", &["config", "get", "registry"])?;
            let hosts = hosts_of_urls(out.split_whitespace())?;
            Ok((hosts, "npm config get registry".into()))
        }
        "pypi" => {
            let out = run_as(caller, "python3", &["-c", PIP_SCRIPT])?;
            let hosts = hosts_of_urls(out.split_whitespace())?;
            Ok((
                hosts,
                "pip's index-url and extra-index-url (its default when unset)".into(),
            ))
        }
        "crates" => crates(caller),
        "goproxy" => {
            let out = run_as(caller, "go", &["env", "GOPROXY"])
                .or_else(|e| env_of(caller, "GOPROXY").ok_or(e))?;
            let urls = out
                .split([',', '|'])
                .map(str::trim)
                .filter(|u| u.contains("://"));
            Ok((hosts_of_urls(urls)?, "go env GOPROXY".into()))
        }
        other => Err(format!(
            "{other:?} is not a preset ({})",
            PRESETS.join(", ")
        )),
    }
}

/// pip's own answer: the index and extra indexes it would use, and, for
/// its compiled-in index, the host its files come from.
const PIP_SCRIPT: &str = r#"
import os
from pip._internal.configuration import Configuration
from pip._internal.models.index import PyPI
c = Configuration(isolated=False)
c.load()
def get(key):
    for section in ("install.", "global.", ":env:."):
        try:
            return c.get_value(section + key)
        except Exception:
            pass
    return None
index = os.environ.get("PIP_INDEX_URL") or get("index-url") or PyPI.simple_url
extra = os.environ.get("PIP_EXTRA_INDEX_URL") or get("extra-index-url") or ""
print(index)
for e in extra.split():
    print(e)
if index == PyPI.simple_url:
    print("https://" + PyPI.file_storage_domain + "/")
"#;

fn env_of(caller: &Caller, name: &str) -> Option<String> {
    caller
        .env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .filter(|v| !v.trim().is_empty())
}

/// `crates`: the caller's source replacement of the default registry.
fn crates(caller: &Caller) -> Resolved {
    let home = env_of(caller, "CARGO_HOME")
        .or_else(|| env_of(caller, "HOME").map(|h| format!("{h}/.cargo")));
    let mut files: Vec<String> = Vec::new();
    // The project's first (cargo reads the nearest first), then the user's.
    let mut dir = Some(caller.workspace);
    while let Some(d) = dir {
        for f in ["config.toml", "config"] {
            files.push(d.join(".cargo").join(f).display().to_string());
        }
        dir = d.parent();
    }
    if let Some(h) = home {
        files.push(format!("{h}/config.toml"));
        files.push(format!("{h}/config"));
    }
    let texts: Vec<String> = files
        .iter()
        .filter_map(|f| run_as(caller, "cat", &["--", f]).ok())
        .collect();
    let replace = texts
        .iter()
        .find_map(|t| toml_value(t, "source.crates-io", "replace-with"));
    let Some(replace) = replace else {
        return Err("the caller's cargo configuration replaces no source of the default registry ([source.crates-io] replace-with in .cargo/config.toml), and cargo's own default cannot be read from cargo without a network call; an administrator names its hosts in egress.presets.crates, or name the hosts in the allowlist".into());
    };
    let url = texts
        .iter()
        .find_map(|t| toml_value(t, &format!("source.{replace}"), "registry"))
        .or_else(|| {
            texts
                .iter()
                .find_map(|t| toml_value(t, &format!("registries.{replace}"), "index"))
        })
        .ok_or_else(|| {
            format!("the caller's cargo configuration replaces the default registry with {replace:?}, which names no registry URL (a local or directory source needs no network)")
        })?;
    Ok((
        hosts_of_urls([url.as_str()])?,
        format!("cargo source replacement {replace:?}"),
    ))
}

/// A string value `key = "..."` under `[table]` of a TOML text (the few
/// keys a source replacement uses; quoted table names as cargo writes
/// them are read too).
fn toml_value(text: &str, table: &str, key: &str) -> Option<String> {
    let mut current = String::new();
    for line in text.lines() {
        let l = line.trim();
        if let Some(t) = l.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            current = t.replace(['"', '\'', ' '], "");
            continue;
        }
        if current != table {
            continue;
        }
        let Some((k, v)) = l.split_once('=') else {
            continue;
        };
        if k.trim().trim_matches('"') == key {
            let v = v.trim();
            let v = v.split('#').next().unwrap_or(v).trim();
            return Some(v.trim_matches(['"', '\'']).to_string());
        }
    }
    None
}

/// The allowlist entry of each URL: its host, with its port when that is
/// not the scheme's own (`http` 80, `https` 443: an entry without a port
/// means those). A `sparse+` or `registry+` prefix is cargo's.
fn hosts_of_urls<'a>(urls: impl IntoIterator<Item = &'a str>) -> Result<Vec<HostPattern>, String> {
    let mut out: Vec<HostPattern> = Vec::new();
    for u in urls {
        let u = u.trim();
        let u = u
            .strip_prefix("sparse+")
            .or_else(|| u.strip_prefix("registry+"))
            .unwrap_or(u);
        let (scheme, rest) = u
            .split_once("://")
            .ok_or_else(|| format!("{u:?} is not a URL"))?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || !p.is_empty() => (h, Some(p)),
            _ => (authority, None),
        };
        let default = match scheme {
            "http" => "80",
            "https" => "443",
            other => return Err(format!("{u:?}: the scheme {other:?} is not http or https")),
        };
        let entry = match port {
            Some(p) if p != default => format!("{host}:{p}"),
            _ => host.to_string(),
        };
        let p = HostPattern::parse(&entry).map_err(|m| format!("{u:?}: {m}"))?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if out.is_empty() {
        return Err("the tool named no registry URL".into());
    }
    Ok(out)
}

/// `program args` as the caller (its uid and gid, no supplementary
/// groups, its environment, in the workspace), its stdout; an error says
/// what failed, never quoting the tool's output.
fn run_as(caller: &Caller, program: &str, args: &[&str]) -> Result<String, String> {
    let mut c = Command::new(program);
    c.args(args)
        .env_clear()
        .envs(caller.env.iter().map(|(k, v)| (k, v)))
        .current_dir(caller.workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if nix::unistd::geteuid().as_raw() != caller.uid
        || nix::unistd::getegid().as_raw() != caller.gid
    {
        use std::os::unix::process::CommandExt;
        // std drops the supplementary groups when root switches users.
        c.uid(caller.uid).gid(caller.gid);
    }
    let mut child = c
        .spawn()
        .map_err(|e| format!("could not run {program} as uid {}: {e}", caller.uid))?;
    let mut out = String::new();
    let stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.take(MAX_ANSWER).read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break st;
        }
        if start.elapsed() > TOOL_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{program} {} took longer than {} s",
                args.first().copied().unwrap_or(""),
                TOOL_DEADLINE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    out.push_str(&reader.join().unwrap_or_default());
    if !status.success() {
        return Err(format!("{program} failed ({status})"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_become_entries_with_their_port_when_it_is_not_the_schemes() {
        let h = hosts_of_urls([
            "http://registry.test:4873/",
            "https://registry.test/",
            "https://mirror.test:443/simple",
            "sparse+http://index.test:8080/",
            "http://user:pw@files.test/x",
        ])
        .unwrap();
        let shown: Vec<String> = h.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            shown,
            [
                "registry.test:4873",
                "registry.test",
                "mirror.test",
                "index.test:8080",
                "files.test"
            ]
        );
        assert!(hosts_of_urls(["file:///srv/index"]).is_err());
        assert!(hosts_of_urls(["http://127.0.0.1:4873/"]).is_err());
        assert!(hosts_of_urls(Vec::<&str>::new()).is_err());
    }

    #[test]
    fn source_replacements_are_read_from_cargo_config() {
        let t = "[source.crates-io]\nreplace-with = \"mirror\"\n\n[source.mirror]\nregistry = \"sparse+http://index.test:8080/\" # ours\n";
        assert_eq!(
            toml_value(t, "source.crates-io", "replace-with").as_deref(),
            Some("mirror")
        );
        assert_eq!(
            toml_value(t, "source.mirror", "registry").as_deref(),
            Some("sparse+http://index.test:8080/")
        );
        assert_eq!(toml_value(t, "source.other", "registry"), None);
    }

    #[test]
    fn presets_are_single_words() {
        for p in PRESETS {
            assert!(is_preset(p));
            assert!(
                HostPattern::parse(p).is_ok(),
                "{p} reads as a host name too"
            );
        }
        assert!(!is_preset("npm.test"));
    }
}
