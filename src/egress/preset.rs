//! Registry presets: an allowlist entry `npm`, `pypi`, `crates` or
//! `goproxy` stands for the hosts of that tool's registry. A system
//! policy's `egress.presets: {NAME: [hosts]}` wins over everything (and is
//! the only source trusted beyond the ceiling: the system wrote it).
//! Otherwise the preset is read from the configuration the tool would use
//! for the user the command runs as, parsed here as data:
//!
//! - `npm`: `npm_config_registry` in the command's environment, else
//!   `registry=` in the project's `.npmrc` (the workspace's), else in the
//!   user's `~/.npmrc`;
//! - `pypi`: `PIP_INDEX_URL` / `PIP_EXTRA_INDEX_URL` in the command's
//!   environment, else `index-url` / `extra-index-url` of the user's
//!   pip.conf (`$XDG_CONFIG_HOME/pip/pip.conf` or `~/.config/pip/pip.conf`,
//!   then `~/.pip/pip.conf`) or `/etc/pip.conf` (`[install]` before
//!   `[global]`);
//! - `crates`: a source replacement of the default registry in the
//!   project's `.cargo/config.toml` (the workspace and its parents), then
//!   the user's (`$CARGO_HOME` or `~/.cargo`): `[source.crates-io]
//!   replace-with`, then that source's `registry` or `[registries.NAME]
//!   index`;
//! - `goproxy`: `GOPROXY` in the command's environment, else in the
//!   user's go env file (`$XDG_CONFIG_HOME/go/env` or `~/.config/go/env`).
//!
//! Resolving a preset never runs a program and never reaches the network:
//! the workspace is the agent's, and whatever ran here would run on the
//! host, outside any sandbox. Files are read on a thread of their own
//! holding the user's credentials (uid, gid, groups), refusing a symlink
//! as the file, anything but a regular file (no fifo, no device: opened
//! non-blocking), and more than [`MAX_CONFIG`] bytes. When nothing
//! configures a preset the tool's built-in default applies, which is not
//! written here: the preset is refused, naming `egress.presets` where an
//! administrator names those hosts. What a user's configuration yields is
//! an ordinary allowlist entry and meets `egress.ceiling` like any other.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::HostPattern;

/// The preset names an allowlist may use.
pub const PRESETS: [&str; 4] = ["npm", "pypi", "crates", "goproxy"];

/// Most bytes of one configuration file read; a larger one is refused.
pub(crate) const MAX_CONFIG: u64 = 64 * 1024;

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
    /// Takes the caller's uid, gid and groups on the calling thread only
    /// (the engine passes the sandbox's; egress does not reach into it).
    pub become_user: fn(u32, u32, &[u32]) -> std::io::Result<()>,
}

/// The hosts of preset `name` for `caller`, with where they came from.
pub(crate) fn resolve(name: &str, caller: &Caller) -> Resolved {
    let unset = |what: &str| {
        format!(
            "nothing configures it ({what}) and the system policy names no hosts for it; the tool's built-in default registry is not assumed: an administrator names its hosts in egress.presets.{name}, or name the hosts in the allowlist"
        )
    };
    match name {
        "npm" => npm(caller).and_then(|found| match found {
            Some((url, from)) => Ok((hosts_of_urls(url.split_whitespace())?, from)),
            None => Err(unset(
                "npm_config_registry, registry= in the project's .npmrc or the user's ~/.npmrc",
            )),
        }),
        "pypi" => pypi(caller).and_then(|found| match found {
            Some((urls, from)) => Ok((hosts_of_urls(urls.iter().map(String::as_str))?, from)),
            None => Err(unset(
                "PIP_INDEX_URL, index-url in the user's pip.conf or /etc/pip.conf",
            )),
        }),
        "crates" => crates(caller).and_then(|found| {
            found.ok_or_else(|| {
                unset("[source.crates-io] replace-with in the project's or the user's .cargo/config.toml")
            })
        }),
        "goproxy" => goproxy(caller).and_then(|found| match found {
            Some((value, from)) => {
                let urls = value
                    .split([',', '|'])
                    .map(str::trim)
                    .filter(|u| u.contains("://"));
                Ok((hosts_of_urls(urls)?, from))
            }
            None => Err(unset("GOPROXY in the environment or the user's go env file")),
        }),
        other => Err(format!(
            "{other:?} is not a preset ({})",
            PRESETS.join(", ")
        )),
    }
}

fn env_of(caller: &Caller, name: &str) -> Option<String> {
    caller
        .env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .filter(|v| !v.trim().is_empty())
}

/// The caller's home: `HOME` in its environment, else its passwd entry.
fn home_of(caller: &Caller) -> Option<PathBuf> {
    env_of(caller, "HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(caller.uid))
                .ok()
                .flatten()
                .map(|u| u.dir)
        })
}

fn config_home(caller: &Caller) -> Option<PathBuf> {
    env_of(caller, "XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .or_else(|| home_of(caller).map(|h| h.join(".config")))
}

/// Read `paths` as the caller (on a thread of its own holding its uid, gid
/// and groups; this thread as it is when it already holds them): each
/// file's text, `None` when it does not exist; an error names the file
/// that could not be read as configuration.
fn read_as(caller: &Caller, paths: Vec<PathBuf>) -> Result<Vec<Option<String>>, String> {
    let me = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    if me == (caller.uid, caller.gid) {
        return paths.iter().map(|p| read_config(p)).collect();
    }
    if me.0 != 0 {
        return Err(format!(
            "this process (uid {}) cannot read configuration as uid {}",
            me.0, caller.uid
        ));
    }
    let creds = crate::workspace::owner::Creds::of_user(caller.uid, caller.gid);
    let (uid, gid, become_user) = (caller.uid, caller.gid, caller.become_user);
    std::thread::spawn(move || {
        // The thread ends with the read: it never changes back.
        become_user(uid, gid, &creds.groups)
            .map_err(|e| format!("could not take the identity of uid {uid}: {e}"))?;
        paths.iter().map(|p| read_config(p)).collect()
    })
    .join()
    .unwrap_or_else(|_| Err("reading configuration failed".into()))
}

/// One configuration file as data: not a symlink, a regular file (opened
/// non-blocking, checked on the open file), at most [`MAX_CONFIG`] bytes,
/// UTF-8. `Ok(None)`: absent (or not reachable as this user).
fn read_config(path: &Path) -> Result<Option<String>, String> {
    let shown = path.display();
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(format!(
                "{shown} is a symlink; configuration files are read only as regular files"
            ));
        }
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::EACCES)
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    let meta = f.metadata().map_err(|e| format!("{shown}: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!(
            "{shown} is not a regular file; configuration files are read only as regular files"
        ));
    }
    let mut bytes = Vec::new();
    f.take(MAX_CONFIG + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{shown}: {e}"))?;
    if bytes.len() as u64 > MAX_CONFIG {
        return Err(format!("{shown} is larger than {MAX_CONFIG} bytes"));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| format!("{shown} is not UTF-8 text"))
}

/// `key = value` lines of an ini-like text (npmrc, pip.conf, go env):
/// `(section, key, value)`, comments (`;`, `#`) and blank lines skipped;
/// an indented line continues the previous value (pip's lists).
fn ini(text: &str) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = Vec::new();
    let mut section = String::new();
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with(';') || l.starts_with('#') {
            continue;
        }
        if let Some(s) = l.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = s.trim().to_string();
            continue;
        }
        if line.starts_with([' ', '\t']) && !l.contains('=') {
            if let Some(last) = out.last_mut() {
                last.2.push(' ');
                last.2.push_str(l);
            }
            continue;
        }
        let Some((k, v)) = l.split_once('=') else {
            continue;
        };
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(v);
        out.push((section.clone(), k.trim().to_string(), v.to_string()));
    }
    out
}

/// The last value of `key` (any spelling in `keys`) in `section` of `text`.
fn ini_value(text: &str, section: &str, keys: &[&str]) -> Option<String> {
    ini(text)
        .into_iter()
        .filter(|(s, k, _)| s == section && keys.contains(&k.as_str()))
        .map(|(_, _, v)| v)
        .next_back()
        .filter(|v| !v.trim().is_empty())
}

/// npm expands `${VAR}` in npmrc values from the environment.
fn expand_env(caller: &Caller, v: &str) -> String {
    let mut out = String::new();
    let mut rest = v;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(j) = after.find('}') else {
            out.push_str(&rest[i..]);
            return out;
        };
        out.push_str(&env_of(caller, &after[..j]).unwrap_or_default());
        rest = &after[j + 1..];
    }
    out.push_str(rest);
    out
}

/// `npm`: the registry URL and where it came from.
fn npm(caller: &Caller) -> Result<Option<(String, String)>, String> {
    for var in ["npm_config_registry", "NPM_CONFIG_REGISTRY"] {
        if let Some(v) = env_of(caller, var) {
            return Ok(Some((v, format!("{var} in the environment"))));
        }
    }
    let mut files = vec![(caller.workspace.join(".npmrc"), "the project's .npmrc")];
    if let Some(h) = home_of(caller) {
        files.push((h.join(".npmrc"), "the user's ~/.npmrc"));
    }
    let texts = read_as(caller, files.iter().map(|(p, _)| p.clone()).collect())?;
    for ((_, from), text) in files.iter().zip(texts) {
        if let Some(v) = text.and_then(|t| ini_value(&t, "", &["registry"])) {
            return Ok(Some((
                expand_env(caller, &v),
                format!("registry= in {from}"),
            )));
        }
    }
    Ok(None)
}

/// `pypi`: the index and extra indexes, and where they came from.
fn pypi(caller: &Caller) -> Result<Option<(Vec<String>, String)>, String> {
    pypi_with(caller, Path::new("/etc/pip.conf"))
}

/// [`pypi`] with the system's pip.conf at `system`.
fn pypi_with(caller: &Caller, system: &Path) -> Result<Option<(Vec<String>, String)>, String> {
    let split = |v: &str| -> Vec<String> { v.split_whitespace().map(String::from).collect() };
    if let Some(index) = env_of(caller, "PIP_INDEX_URL") {
        let mut urls = split(&index);
        urls.extend(split(
            &env_of(caller, "PIP_EXTRA_INDEX_URL").unwrap_or_default(),
        ));
        return Ok(Some((
            urls,
            "PIP_INDEX_URL (and PIP_EXTRA_INDEX_URL) in the environment".into(),
        )));
    }
    // pip's order: later files override earlier ones.
    let mut files = vec![system.to_path_buf()];
    if let Some(h) = home_of(caller) {
        files.push(h.join(".pip/pip.conf"));
    }
    if let Some(c) = config_home(caller) {
        files.push(c.join("pip/pip.conf"));
    }
    let texts = read_as(caller, files.clone())?;
    let (mut index, mut extra): (Option<(String, PathBuf)>, Option<String>) = (None, None);
    for (path, text) in files.iter().zip(texts) {
        let Some(t) = text else { continue };
        for key in [
            ["index-url", "index_url"],
            ["extra-index-url", "extra_index_url"],
        ] {
            let v = ["install", "global"]
                .iter()
                .find_map(|s| ini_value(&t, s, &key));
            if let Some(v) = v {
                if key[0] == "index-url" {
                    index = Some((v, path.clone()));
                } else {
                    extra = Some(v);
                }
            }
        }
    }
    if let Some(e) = env_of(caller, "PIP_EXTRA_INDEX_URL") {
        extra = Some(e);
    }
    let Some((index, path)) = index else {
        return Ok(None);
    };
    let mut urls = split(&index);
    urls.extend(split(&extra.unwrap_or_default()));
    Ok(Some((
        urls,
        format!("index-url (and extra-index-url) in {}", path.display()),
    )))
}

/// `goproxy`: `GOPROXY`, and where it came from.
fn goproxy(caller: &Caller) -> Result<Option<(String, String)>, String> {
    if let Some(v) = env_of(caller, "GOPROXY") {
        return Ok(Some((v, "GOPROXY in the environment".into())));
    }
    let Some(file) = config_home(caller).map(|c| c.join("go/env")) else {
        return Ok(None);
    };
    let text = read_as(caller, vec![file.clone()])?.pop().flatten();
    Ok(text
        .and_then(|t| ini_value(&t, "", &["GOPROXY"]))
        .map(|v| (v, format!("GOPROXY in {}", file.display()))))
}

/// `crates`: the caller's source replacement of the default registry.
fn crates(caller: &Caller) -> Result<Option<(Vec<HostPattern>, String)>, String> {
    let home = env_of(caller, "CARGO_HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .or_else(|| home_of(caller).map(|h| h.join(".cargo")));
    let mut files: Vec<PathBuf> = Vec::new();
    // The project's first (cargo reads the nearest first), then the user's.
    let mut dir = Some(caller.workspace);
    while let Some(d) = dir {
        for f in ["config.toml", "config"] {
            files.push(d.join(".cargo").join(f));
        }
        dir = d.parent();
    }
    if let Some(h) = home {
        files.push(h.join("config.toml"));
        files.push(h.join("config"));
    }
    let texts: Vec<String> = read_as(caller, files)?.into_iter().flatten().collect();
    let replace = texts
        .iter()
        .find_map(|t| toml_value(t, "source.crates-io", "replace-with"));
    let Some(replace) = replace else {
        return Ok(None);
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
    Ok(Some((
        hosts_of_urls([url.as_str()])?,
        format!("cargo source replacement {replace:?}"),
    )))
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

    fn me<'a>(env: &'a [(String, String)], ws: &'a Path) -> Caller<'a> {
        Caller {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            env,
            workspace: ws,
            become_user: stay,
        }
    }

    /// The identity change of these tests: this thread keeps root's
    /// (the engine passes the sandbox's thread-only change, tested with
    /// the daemon serving an ordinary user in tests/doors_network.rs).
    fn stay(_: u32, _: u32, _: &[u32]) -> std::io::Result<()> {
        Ok(())
    }

    fn refuse(_: u32, _: u32, _: &[u32]) -> std::io::Result<()> {
        Err(std::io::Error::from_raw_os_error(libc::EPERM))
    }

    fn shown(r: &Resolved) -> Vec<String> {
        r.as_ref()
            .unwrap()
            .0
            .iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn npm_reads_the_environment_then_the_projects_then_the_users_npmrc() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let mut env = vec![("HOME".to_string(), home.path().display().to_string())];
        // Nothing configures it: refused, naming the preset's system setting.
        let e = resolve("npm", &me(&env, ws.path())).unwrap_err();
        assert!(e.contains("egress.presets.npm"), "{e}");
        std::fs::write(
            home.path().join(".npmrc"),
            "; user\nregistry = \"https://user.test/\"\n",
        )
        .unwrap();
        assert_eq!(shown(&resolve("npm", &me(&env, ws.path()))), ["user.test"]);
        std::fs::write(
            ws.path().join(".npmrc"),
            "# project\n@scope:registry=https://scoped.test/\nregistry=http://${REG}:4873/\n",
        )
        .unwrap();
        env.push(("REG".into(), "project.test".into()));
        let r = resolve("npm", &me(&env, ws.path()));
        assert_eq!(shown(&r), ["project.test:4873"]);
        assert!(r.unwrap().1.contains("project's .npmrc"));
        env.push(("npm_config_registry".into(), "https://env.test/".into()));
        assert_eq!(shown(&resolve("npm", &me(&env, ws.path()))), ["env.test"]);
    }

    #[test]
    fn a_symlink_fifo_or_huge_file_is_not_read_as_configuration() {
        let ws = tempfile::tempdir().unwrap();
        let env = vec![("HOME".to_string(), "/nonexistent".to_string())];
        let other = ws.path().join("other");
        std::fs::write(&other, "registry=https://x.test/\n").unwrap();
        std::os::unix::fs::symlink(&other, ws.path().join(".npmrc")).unwrap();
        let e = resolve("npm", &me(&env, ws.path())).unwrap_err();
        assert!(e.contains("is a symlink"), "{e}");
        std::fs::remove_file(ws.path().join(".npmrc")).unwrap();
        nix::unistd::mkfifo(&ws.path().join(".npmrc"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = resolve("npm", &me(&env, ws.path())).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_file(ws.path().join(".npmrc")).unwrap();
        let big = format!(
            "registry=https://x.test/\n{}",
            "#".repeat(MAX_CONFIG as usize)
        );
        std::fs::write(ws.path().join(".npmrc"), big).unwrap();
        let e = resolve("npm", &me(&env, ws.path())).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
    }

    #[test]
    fn pypi_reads_the_environment_then_pip_conf_install_before_global() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let system = home.path().join("etc-pip.conf");
        let mut env = vec![
            ("HOME".to_string(), home.path().display().to_string()),
            (
                "XDG_CONFIG_HOME".to_string(),
                home.path().join("xdg").display().to_string(),
            ),
        ];
        let hosts = |env: &[(String, String)]| -> Option<Vec<String>> {
            let (urls, _) = pypi_with(&me(env, ws.path()), &system).unwrap()?;
            let h = hosts_of_urls(urls.iter().map(String::as_str)).unwrap();
            Some(h.iter().map(|p| p.to_string()).collect())
        };
        assert_eq!(hosts(&env), None);
        std::fs::write(
            &system,
            "[global]\nindex-url = https://system.test/simple\n",
        )
        .unwrap();
        assert_eq!(hosts(&env).unwrap(), ["system.test"]);
        std::fs::create_dir_all(home.path().join("xdg/pip")).unwrap();
        std::fs::write(
            home.path().join("xdg/pip/pip.conf"),
            "[global]\nindex-url = https://global.test/simple\n[install]\nindex_url = https://install.test/simple\nextra-index-url =\n    https://extra1.test/\n    http://extra2.test:8080/\n",
        )
        .unwrap();
        assert_eq!(
            hosts(&env).unwrap(),
            ["install.test", "extra1.test", "extra2.test:8080"]
        );
        env.push(("PIP_INDEX_URL".into(), "https://env.test/simple".into()));
        assert_eq!(hosts(&env).unwrap(), ["env.test"]);
    }

    #[test]
    fn goproxy_and_crates_without_configuration_are_refused_naming_the_setting() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let mut env = vec![("HOME".to_string(), home.path().display().to_string())];
        for p in ["goproxy", "crates"] {
            let e = resolve(p, &me(&env, ws.path())).unwrap_err();
            assert!(e.contains(&format!("egress.presets.{p}")), "{e}");
        }
        env.push(("GOPROXY".into(), "https://proxy.test,direct".into()));
        assert_eq!(
            shown(&resolve("goproxy", &me(&env, ws.path()))),
            ["proxy.test"]
        );
        std::fs::create_dir_all(ws.path().join(".cargo")).unwrap();
        std::fs::write(
            ws.path().join(".cargo/config.toml"),
            "[source.crates-io]\nreplace-with = \"m\"\n[source.m]\nregistry = \"sparse+https://index.test/\"\n",
        )
        .unwrap();
        assert_eq!(
            shown(&resolve("crates", &me(&env, ws.path()))),
            ["index.test"]
        );
    }

    #[test]
    fn another_users_files_are_read_only_after_taking_their_identity() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join(".npmrc"), "registry=https://x.test/\n").unwrap();
        let env = vec![("HOME".to_string(), "/nonexistent".to_string())];
        let other = |become_user| Caller {
            uid: 65534,
            gid: 65534,
            env: &env,
            workspace: ws.path(),
            become_user,
        };
        // Reading as uid 65534 goes through its identity: when that cannot
        // be taken, nothing is read (fail closed, naming the uid).
        let e = resolve("npm", &other(refuse)).unwrap_err();
        assert!(e.contains("uid 65534"), "{e}");
        assert_eq!(shown(&resolve("npm", &other(stay))), ["x.test"]);
        assert!(nix::unistd::geteuid().is_root());
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
