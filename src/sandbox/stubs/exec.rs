//! The `__stub-exec` program: the interpreter of the stub scripts, run
//! inside the sandbox for every call of a stubbed tool.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::*;

// ---------------------------------------------------------------------------

/// Entry point of the `dryrun` binary when `argv[1]` starts with
/// [`STUB_ARG_PREFIX`]:
/// `argv = [interpreter, "__stub-exec TOOL", script path, args...]`.
pub fn run_stub(argv: Vec<std::ffi::OsString>) -> ! {
    run(argv, Program::Dryrun)
}

/// Entry point of the small `dryrun-stub` program (the stub scripts'
/// interpreter when it is installed beside `dryrun`): the same, except
/// that a table it cannot read as one of its own build's is handed to the
/// `dryrun` binary, which is always in the sandbox too.
pub fn run_small_stub(argv: Vec<std::ffi::OsString>) -> ! {
    run(argv, Program::Small)
}

/// Which binary runs the stub code.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Program {
    Dryrun,
    Small,
}

/// The run's table.
fn parse_table(bytes: &[u8]) -> Result<StubTable, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("{STUB_TABLE}: {e}"))
}

/// The run's table, when it is one this build wrote: another build's
/// table (or one this build cannot parse) may mean other rules.
fn table_of_this_build(bytes: &[u8]) -> Result<StubTable, String> {
    let table = parse_table(bytes)?;
    if table.build != BUILD_ID {
        return Err(format!(
            "{STUB_TABLE} was written by another build of dryrun ({:?}, this program is {BUILD_ID:?})",
            table.build
        ));
    }
    Ok(table)
}

/// Run `path` with `argv0` and `args` in place of this process; returns
/// only what kept it from running.
fn exec(path: &Path, argv0: &Path, args: &[std::ffi::OsString]) -> String {
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &[u8]| std::ffi::CString::new(s).map_err(|_| "NUL in an argument".to_string());
    let run = || -> Result<std::convert::Infallible, String> {
        let mut cargv = vec![c(argv0.as_os_str().as_bytes())?];
        for a in args {
            cargv.push(c(a.as_bytes())?);
        }
        nix::unistd::execv(&c(path.as_os_str().as_bytes())?, &cargv).map_err(|e| e.to_string())
    };
    let Err(e) = run();
    e
}

/// Hand the call, as it came, to the `dryrun` binary.
fn hand_to_dryrun(argv: &[std::ffi::OsString], why: &str) -> Result<i32, String> {
    let dryrun = Path::new(STUB_INTERPRETER);
    let e = exec(dryrun, dryrun, argv.get(1..).unwrap_or_default());
    Err(format!(
        "{why}; and cannot run {STUB_INTERPRETER} instead: {e}"
    ))
}

fn run(argv: Vec<std::ffi::OsString>, program: Program) -> ! {
    let code = match stub_main(argv, program) {
        Ok(code) => code,
        Err(msg) => {
            let _ = writeln!(std::io::stderr(), "dryrun stub: {msg}");
            126
        }
    };
    std::process::exit(code)
}

fn stub_main(argv: Vec<std::ffi::OsString>, program: Program) -> Result<i32, String> {
    use std::os::unix::ffi::OsStrExt;
    let lossy = |s: &std::ffi::OsString| String::from_utf8_lossy(s.as_bytes()).into_owned();
    let mut tool = argv
        .get(1)
        .map(lossy)
        .and_then(|a| a.strip_prefix(STUB_ARG_PREFIX).map(str::to_string))
        .ok_or("missing tool name")?;
    // The path the command ran (the kernel passes it to the interpreter):
    // `/.dryrun/stubs/bin/gh` through PATH, `/usr/bin/curl`, `./c`, ...
    let script = PathBuf::from(argv.get(2).cloned().unwrap_or_else(|| tool.clone().into()));
    let raw_args: Vec<std::ffi::OsString> = argv.iter().skip(3).cloned().collect();
    let args: Vec<String> = raw_args.iter().map(lossy).collect();
    let bytes = std::fs::read(STUB_TABLE).map_err(|e| {
        format!("cannot read {STUB_TABLE}: {e} (stub mode runs only inside a rehearsal)")
    })?;
    let table = match program {
        // The binary whose helper wrote the table.
        Program::Dryrun => parse_table(&bytes)?,
        Program::Small => match table_of_this_build(&bytes) {
            Ok(t) => t,
            Err(why) => return hand_to_dryrun(&argv, &why),
        },
    };
    // Another name in the image for the file this stub covers (a
    // multi-call binary: `rustc` and `cargo` both lead to `rustup`) is that
    // name's own program: stubbed if it is a stubbed tool, else the real one.
    let invoked = script
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut alias = false;
    let covered = CoveredFiles::find();
    if invoked != tool && is_image_alias(&covered, &invoked, &script) {
        if table.rules.iter().any(|r| r.tool == invoked) {
            tool = invoked.clone();
        } else {
            alias = true;
        }
    }
    let decision = if alias {
        StubDecision::Passthrough
    } else {
        table.decide(&tool, &args)
    };
    let (rule, source, answer, stdin_mode) = match decision {
        StubDecision::Passthrough => {
            let Some((real, known_as)) = find_real(&covered, &tool, &script) else {
                let _ = writeln!(std::io::stderr(), "{tool}: command not found");
                return Ok(127);
            };
            // argv[0]: the path the tool is known by in the image. Live, a
            // PATH call gets the bare name, but a tool that finds itself by
            // searching PATH for it (python's sys.executable) would find the
            // stub's script here.
            let e = exec(&real, &known_as, &raw_args);
            return Err(format!("cannot run the real {tool}: {e}"));
        }
        StubDecision::Answer {
            rule,
            source,
            answer,
            stdin,
        } => (rule, source, answer, stdin),
    };
    let stdin = if stdin_mode.reads(&args) {
        read_stdin()
    } else {
        StdinRecord {
            read: false,
            ..Default::default()
        }
    };
    // Only shell identifiers are named; the others are counted.
    let (env_names, unnamed): (Vec<String>, Vec<String>) = std::env::vars_os()
        .map(|(k, _)| String::from_utf8_lossy(k.as_bytes()).into_owned())
        .partition(|k| crate::model::text::is_shell_identifier(k));
    let mut env_names: Vec<String> = env_names
        .into_iter()
        .filter(|k| k.len() <= NAME_MAX_KEPT)
        .collect();
    env_names.sort();
    env_names.dedup();
    env_names.truncate(ENV_NAMES_MAX_KEPT);
    let (kept, truncated) = kept_argv(&tool, &args);
    let action = WouldBeAction {
        argv_hash: argv_hash(&tool, &args),
        argv: kept,
        argv_truncated: truncated,
        argc: if truncated { args.len() + 1 } else { 0 },
        tool,
        cwd: std::env::current_dir()
            .map(|p| cut(&p.display().to_string(), PATH_MAX_KEPT))
            .unwrap_or_default(),
        stdin,
        env_names,
        env_unnamed: unnamed.len(),
        rule,
        source: source.to_string(),
        answer: answer.clone(),
    };
    record_call(&action)?;
    let mut out = std::io::stdout();
    let _ = out.write_all(answer.stdout.as_bytes());
    let _ = out.flush();
    let mut err = std::io::stderr();
    let _ = err.write_all(answer.stderr.as_bytes());
    Ok(answer.exit)
}

/// The files stub scripts cover: stub scripts live on the sandbox root's
/// own tmpfs, the image's programs come from other mounts, so a covered
/// file is a regular file on that tmpfs's device.
struct CoveredFiles {
    stub_dev: Option<u64>,
}

impl CoveredFiles {
    fn find() -> Self {
        use std::os::unix::fs::MetadataExt;
        CoveredFiles {
            stub_dev: std::fs::metadata(STUB_BIN_DIR).ok().map(|m| m.dev()),
        }
    }

    fn is_covered(&self, m: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt;
        m.is_file() && Some(m.dev()) == self.stub_dev
    }

    fn covers(&self, p: &Path) -> bool {
        std::fs::metadata(p).is_ok_and(|m| self.is_covered(&m))
    }
}

/// Is `name` in the image's PATH directories a file a stub covers and the
/// very file `script` leads to (another name for a tool's file, as `rustc`
/// and `cargo` are for `rustup`)? A link named like some other stubbed tool
/// (`/tmp/wget -> /usr/bin/curl`) is not: it runs curl.
fn is_image_alias(covered: &CoveredFiles, name: &str, script: &Path) -> bool {
    let Ok(target) = std::fs::canonicalize(script) else {
        return false;
    };
    !name.is_empty()
        && !name.contains('/')
        && PATH_DIRS.iter().any(|d| {
            let p = Path::new(d).join(name);
            covered.covers(&p) && std::fs::canonicalize(&p).is_ok_and(|c| c == target)
        })
}

/// The real program behind a passthrough call, and the path it is known by:
/// the file the command ran, or (called through PATH) the first `tool` on
/// the command's PATH after the stubs' directory; a file a stub covers is
/// run from [`REAL_ROOT`] by its resolved path, so everything relative to
/// it is where it expects.
fn find_real(covered: &CoveredFiles, tool: &str, script: &Path) -> Option<(PathBuf, PathBuf)> {
    let real = |p: &Path| {
        let m = std::fs::metadata(p).ok()?;
        if !covered.is_covered(&m) {
            return (m.is_file() && m.permissions().mode() & 0o111 != 0).then(|| p.to_path_buf());
        }
        // Resolved here (every link followed), then taken from the view of
        // the image no stub covers.
        let resolved = std::fs::canonicalize(p).ok()?;
        let real = Path::new(REAL_ROOT).join(resolved.strip_prefix("/").ok()?);
        std::fs::metadata(&real)
            .is_ok_and(|m| m.is_file() && !covered.is_covered(&m))
            .then_some(real)
    };
    if !script.starts_with(STUB_BIN_DIR) {
        return real(script).map(|r| (r, script.to_path_buf()));
    }
    // Found through PATH at the stubs' place: the real tool is the next one
    // on PATH after it (what the lookup would have found without stubs).
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .skip_while(|d| Path::new(d) != Path::new(STUB_BIN_DIR))
        .filter(|d| !d.is_empty() && Path::new(d) != Path::new(STUB_BIN_DIR))
        .find_map(|d| {
            let p = Path::new(d).join(tool);
            real(&p).map(|r| (r, p))
        })
}

fn read_stdin() -> StdinRecord {
    let mut hasher = blake3::Hasher::new();
    let mut head = Vec::new();
    let mut total: u64 = 0;
    let mut buf = vec![0u8; 64 * 1024];
    let mut stdin = std::io::stdin().lock();
    let mut truncated = false;
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                if head.len() < STDIN_HEAD {
                    let take = (STDIN_HEAD - head.len()).min(n);
                    head.extend_from_slice(&buf[..take]);
                }
                total += n as u64;
                if total >= STDIN_MAX {
                    truncated = true;
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    StdinRecord {
        read: true,
        bytes: total,
        blake3: hasher.finalize().to_hex().to_string(),
        head: String::from_utf8_lossy(&head).into_owned(),
        truncated,
    }
}

/// One file per call, named so that sorting gives call order.
fn record_call(a: &WouldBeAction) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let ns = crate::sandbox::helper::monotonic_ns();
    let name = format!("{CALLS_DIR}/{ns:020}-{:010}.json", std::process::id());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&name)
        .map_err(|e| format!("cannot record the call (so it is not answered): {e}"))?;
    f.write_all(&serde_json::to_vec(a).expect("serializes"))
        .map_err(|e| format!("cannot record the call (so it is not answered): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The small program decides only tables of its own build.
    #[test]
    fn a_table_of_another_build_is_not_this_programs() {
        let mine = serde_json::to_vec(&StubTable::new(vec![], None)).unwrap();
        assert!(table_of_this_build(&mine).is_ok());
        let mut other = StubTable::new(vec![], None);
        other.build = "0123456789abcdef".into();
        let err = table_of_this_build(&serde_json::to_vec(&other).unwrap()).unwrap_err();
        assert!(err.contains("another build"), "{err}");
        let unset = serde_json::to_vec(&serde_json::json!({"rules": []})).unwrap();
        assert!(table_of_this_build(&unset).is_err());
        assert!(table_of_this_build(b"{\"rules\": 3}").is_err());
    }
}
