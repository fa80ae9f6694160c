//! Workspace-relative paths: byte-exact internally, escaped for humans, and
//! matched against intent globs.

use globset::GlobBuilder;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub(crate) use crate::model::text::escape_for_humans;

/// How every host-side and evidence-walk open below a workspace (or a
/// layer of it) resolves its path: beneath the root it starts from, through
/// no symlink or magic link and no mount crossing, never following the last
/// component, close-on-exec.
pub(crate) fn beneath(flags: nix::fcntl::OFlag) -> nix::fcntl::OpenHow {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    OpenHow::new()
        .flags(flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .mode(nix::sys::stat::Mode::empty())
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS
                | ResolveFlag::RESOLVE_NO_XDEV,
        )
}

/// A set of workspace-relative globs with directory semantics: a pattern
/// matches a path when it matches the path itself or any of its ancestors, so
/// `secrets/` or `build` cover everything beneath them. `*` never crosses `/`;
/// use `**` for that.
#[derive(Debug, Clone, Default)]
pub(crate) struct PathMatcher {
    pub patterns: Vec<String>,
    /// (glob, index of the pattern it came from).
    globs: Vec<(globset::Glob, usize)>,
    /// All patterns compiled together (see [`Compiled`]), once, at the
    /// first look-up ([`PathMatcher::at_any_depth_lazy`]) or at
    /// construction; `Err` only for a lazy matcher whose set could not be
    /// compiled, which then covers every path (fails closed).
    set: std::sync::OnceLock<Result<Compiled, String>>,
    /// Patterns kept as text, parsed at the first look-up
    /// ([`PathMatcher::deferred_any_depth`]).
    deferred: bool,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum PatternError {
    #[error("pattern {pattern:?} is absolute; write it relative to the workspace root")]
    Absolute { pattern: String },
    #[error("pattern {pattern:?} climbs out of the workspace with '..'; remove the '..'")]
    ClimbsOut { pattern: String },
    #[error("pattern {pattern:?} is empty")]
    Empty { pattern: String },
    #[error("pattern {pattern:?} is not a valid glob: {message}")]
    Glob { pattern: String, message: String },
}

impl PathMatcher {
    pub(crate) fn new(patterns: &[String]) -> Result<Self, PatternError> {
        let mut m = PathMatcher::default();
        for p in patterns {
            m.add_with(p, false)?;
        }
        m.compile_now()?;
        Ok(m)
    }

    /// Protected-path semantics: a pattern without a leading `/` matches
    /// at any depth (`package.json` covers `sub/pkg/package.json`,
    /// `.git/hooks/` covers `a/b/.git/hooks/x`); a pattern with a leading
    /// `/` matches only at the workspace root (`/Jenkinsfile`). Otherwise
    /// the same globs and directory semantics as [`PathMatcher::new`].
    #[cfg(test)]
    pub(crate) fn at_any_depth(patterns: &[String]) -> Result<Self, PatternError> {
        let m = Self::at_any_depth_lazy(patterns)?;
        m.compile_now()?;
        Ok(m)
    }

    /// [`PathMatcher::at_any_depth`] with every pattern checked now and the
    /// set compiled at the first look-up: a policy's protected paths cost
    /// nothing to a run that changes no file. Should the set not compile
    /// (each glob did, so only a size limit could), every path is covered:
    /// a protected-path matcher fails closed.
    pub(crate) fn at_any_depth_lazy(patterns: &[String]) -> Result<Self, PatternError> {
        let mut m = PathMatcher::default();
        for p in patterns {
            m.add_with(p, true)?;
        }
        Ok(m)
    }

    /// Protected-path patterns that were already checked once (a policy
    /// read back from its cache): nothing is parsed until the first
    /// look-up; a pattern that no longer parses then covers every path.
    pub(crate) fn deferred_any_depth(patterns: &[String]) -> Self {
        PathMatcher {
            patterns: patterns.to_vec(),
            deferred: true,
            ..PathMatcher::default()
        }
    }

    fn compile(&self) -> &Result<Compiled, String> {
        self.set.get_or_init(|| {
            let parsed;
            let globs = if self.deferred {
                parsed = Self::at_any_depth_lazy(&self.patterns)
                    .map_err(|e| e.to_string())?
                    .globs;
                &parsed
            } else {
                &self.globs
            };
            let mut b = globset::GlobSetBuilder::new();
            let mut set_index = Vec::new();
            let mut literals = Literals::default();
            for (g, i) in globs {
                if !literals.add(g.glob(), *i) {
                    b.add(g.clone());
                    set_index.push(*i);
                }
            }
            let set = b.build().map_err(|e| e.kind().to_string())?;
            Ok(Compiled {
                set,
                set_index,
                literals,
                globs: globs.clone(),
                twins: std::sync::OnceLock::new(),
                parent: Memo::default(),
            })
        })
    }

    fn compile_now(&self) -> Result<(), PatternError> {
        self.compile()
            .as_ref()
            .map(|_| ())
            .map_err(|message| PatternError::Glob {
                pattern: self.patterns.join(", "),
                message: message.clone(),
            })
    }

    fn add_with(&mut self, pattern: &str, any_depth: bool) -> Result<(), PatternError> {
        let mut pat = pattern.trim();
        if pat.is_empty() {
            return Err(PatternError::Empty {
                pattern: pattern.into(),
            });
        }
        let mut anchored = !any_depth;
        if any_depth && let Some(rest) = pat.strip_prefix('/') {
            pat = rest;
            anchored = true;
            if pat.is_empty() || pat.starts_with('/') {
                return Err(PatternError::Absolute {
                    pattern: pattern.into(),
                });
            }
        }
        if pat.starts_with('/') {
            return Err(PatternError::Absolute {
                pattern: pattern.into(),
            });
        }
        if pat.split('/').any(|c| c == "..") {
            return Err(PatternError::ClimbsOut {
                pattern: pattern.into(),
            });
        }
        let mut norm = pat.trim_end_matches('/').to_string();
        while let Some(rest) = norm.strip_prefix("./") {
            norm = rest.to_string();
        }
        if let Some(base) = norm.strip_suffix("/**") {
            // `dir/**` also covers `dir` itself (deleting the directory).
            norm = base.to_string();
        }
        if norm.is_empty() || norm == "." || norm == "**" {
            norm = "**".into();
        } else if !anchored && !norm.starts_with("**/") {
            // `**/x` also matches `x` at the root.
            norm = format!("**/{norm}");
        }
        let build = |g: &str| {
            build_glob(g).map_err(|e| PatternError::Glob {
                pattern: pattern.into(),
                message: e.kind().to_string(),
            })
        };
        // One glob per pattern: what lies beneath a match is covered by
        // matching the path's ancestors too (`first_match`), not by a
        // `{norm}/**` twin, which globset can only compile into a regex
        // (about 5 ms for the default policy's protected paths, paid by
        // every run that changes a file).
        let glob = build(&norm)?;
        self.patterns.push(pattern.to_string());
        self.globs.push((glob, self.patterns.len() - 1));
        // The set is compiled once, after the last pattern (see `compile`).
        self.set = std::sync::OnceLock::new();
        Ok(())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The first pattern covering `path` (bytes, workspace-relative): a
    /// pattern covers what it matches and everything beneath it.
    pub(crate) fn first_match(&self, path: &[u8]) -> Option<&str> {
        let Ok(c) = self.compile() else {
            return self.patterns.first().map(String::as_str);
        };
        let found = if path.iter().filter(|b| **b == b'/').count() > MAX_ANCESTORS {
            c.through_twins(path)
        } else {
            c.own_or_inherited(path)
        };
        found.map(|i| self.patterns[i].as_str())
    }

    pub(crate) fn matches(&self, path: &[u8]) -> bool {
        self.first_match(path).is_some()
    }
}

/// Beyond this many ancestors a path is looked up once, by each pattern
/// and its `/**` twin (compiled only then): a tree thousands of
/// directories deep costs a look-up per path, not one per ancestor.
const MAX_ANCESTORS: usize = 64;

/// The globs of a pattern, as every matcher builds them.
fn build_glob(text: &str) -> Result<globset::Glob, globset::Error> {
    GlobBuilder::new(text)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
}

/// A matcher's patterns compiled: one glob each, matched against a path
/// and its ancestors. Most patterns match by a literal, a name or a
/// suffix; a `PATTERN/**` twin for what lies beneath a match would need a
/// regex each, and compiling the default policy's protected paths into one
/// cost every run that changed a file about 5 ms.
#[derive(Debug, Clone)]
struct Compiled {
    /// The globs that are not plain names or paths ([`Literals`]).
    set: globset::GlobSet,
    /// The pattern index of each glob in `set`, in its order.
    set_index: Vec<usize>,
    /// The patterns that are a plain name or path (most protected paths:
    /// `package.json`, `.github/workflows`), looked up by equality: the
    /// default policy's 275 of them cost about 0.4 ms of globset's build.
    literals: Literals,
    /// Each glob, in its order, with its pattern's index (for a deferred
    /// matcher, the globs built at that moment).
    globs: Vec<(globset::Glob, usize)>,
    /// Each glob and its twin, for the deepest paths ([`MAX_ANCESTORS`]).
    twins: std::sync::OnceLock<Result<(globset::GlobSet, Vec<usize>), String>>,
    /// The last parent looked up and the first pattern covering it: the
    /// paths of a change list come in walk order, siblings together.
    parent: Memo,
}

/// Globs without a wildcard, class, alternation or escape: `NAME/PATH`
/// matches exactly that path, `**/NAME/PATH` that path or any path ending
/// in `/NAME/PATH` (what globset's `**/` with a literal separator does).
#[derive(Debug, Clone, Default)]
struct Literals {
    /// Whole paths, with their first pattern's index.
    exact: std::collections::HashMap<Vec<u8>, usize>,
    /// Trailing paths (after `**/`), with their first pattern's index.
    tails: std::collections::HashMap<Vec<u8>, usize>,
    /// The most components of a trailing path.
    tail_depth: usize,
}

impl Literals {
    /// Take `glob` (the pattern `index`) when it is a literal.
    fn add(&mut self, glob: &str, index: usize) -> bool {
        let (tail, text) = match glob.strip_prefix("**/") {
            Some(rest) => (true, rest),
            None => (false, glob),
        };
        let plain = |c: char| !matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\');
        if text.is_empty() || !text.chars().all(plain) || text.split('/').any(str::is_empty) {
            return false;
        }
        let map = if tail {
            self.tail_depth = self.tail_depth.max(text.split('/').count());
            &mut self.tails
        } else {
            &mut self.exact
        };
        let slot = map.entry(text.as_bytes().to_vec()).or_insert(index);
        *slot = (*slot).min(index);
        true
    }

    /// The first literal pattern matching `p`.
    fn first(&self, p: &[u8]) -> Option<usize> {
        let exact = self.exact.get(p).copied();
        if self.tails.is_empty() {
            return exact;
        }
        // `p` itself, then what follows each of its last separators.
        let cuts = p
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, b)| **b == b'/')
            .map(|(i, _)| i + 1)
            .take(self.tail_depth);
        std::iter::once(0)
            .chain(cuts)
            .filter_map(|start| self.tails.get(&p[start..]).copied())
            .chain(exact)
            .min()
    }
}

#[derive(Debug, Default)]
struct Memo(std::sync::Mutex<Option<(Vec<u8>, Option<usize>)>>);

impl Clone for Memo {
    fn clone(&self) -> Self {
        Memo::default()
    }
}

impl Compiled {
    /// The first pattern matching `p` itself.
    fn own(&self, p: &[u8]) -> Option<usize> {
        let literal = self.literals.first(p);
        if self.set.is_empty() {
            return literal;
        }
        let candidate = globset::Candidate::new(std::ffi::OsStr::from_bytes(p));
        let mut hits = Vec::new();
        self.set.matches_candidate_into(&candidate, &mut hits);
        hits.iter().map(|g| self.set_index[*g]).chain(literal).min()
    }

    /// The first pattern matching `dir` or one of its ancestors.
    fn beneath(&self, dir: &[u8]) -> Option<usize> {
        let ends = dir
            .iter()
            .enumerate()
            .filter(|(i, b)| **b == b'/' && *i > 0)
            .map(|(i, _)| i)
            .chain(std::iter::once(dir.len()));
        ends.filter_map(|end| self.own(&dir[..end])).min()
    }

    fn own_or_inherited(&self, path: &[u8]) -> Option<usize> {
        let own = self.own(path);
        let Some(cut) = path.iter().rposition(|b| *b == b'/').filter(|i| *i > 0) else {
            return own;
        };
        let parent = &path[..cut];
        let inherited = {
            let mut memo = self.parent.0.lock().unwrap_or_else(|p| p.into_inner());
            match memo.as_ref() {
                Some((p, first)) if p.as_slice() == parent => *first,
                _ => {
                    let first = self.beneath(parent);
                    *memo = Some((parent.to_vec(), first));
                    first
                }
            }
        };
        own.into_iter().chain(inherited).min()
    }

    /// One look-up by each glob and its twin. Should the twins not compile
    /// (each glob did, so only a size limit could), every path is covered.
    fn through_twins(&self, path: &[u8]) -> Option<usize> {
        let twins = self.twins.get_or_init(|| {
            let mut b = globset::GlobSetBuilder::new();
            let mut index = Vec::new();
            for (g, i) in &self.globs {
                b.add(g.clone());
                index.push(*i);
                if g.glob() != "**" {
                    b.add(build_glob(&format!("{}/**", g.glob())).map_err(|e| e.to_string())?);
                    index.push(*i);
                }
            }
            Ok((b.build().map_err(|e| e.to_string())?, index))
        });
        match twins {
            Ok((set, index)) => set
                .matches(std::ffi::OsStr::from_bytes(path))
                .into_iter()
                .map(|g| index[g])
                .min(),
            Err(_) => self.globs.iter().map(|(_, i)| *i).min(),
        }
    }
}

/// How this process opens a path on the host for its looks: resolved
/// path and an `O_PATH` descriptor of it (`follow`: symlinks resolved as
/// `canonicalize` does; else none may be on the way). The binary installs
/// the view's resolver at start ([`install_host_open`]; the workspace does
/// not import the sandbox), which opens nothing on a mount it does not
/// cross (a FUSE mount another user serves: an error naming it).
pub type HostOpen = fn(&Path, bool) -> std::io::Result<(PathBuf, std::os::fd::OwnedFd)>;

static HOST_OPEN: std::sync::OnceLock<HostOpen> = std::sync::OnceLock::new();

/// Installs the opener every host look of the workspace goes through.
pub fn install_host_open(open: HostOpen) {
    let _ = HOST_OPEN.set(open);
}

/// `p` opened as [`HostOpen`] says, through the installed opener; without
/// one (a library test), from `/` with no symlink followed on the way
/// (`follow`: after `canonicalize`).
pub(crate) fn open_on_host(
    p: &Path,
    follow: bool,
) -> std::io::Result<(PathBuf, std::os::fd::OwnedFd)> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    if let Some(open) = HOST_OPEN.get() {
        return open(p, follow);
    }
    let p = if follow {
        std::fs::canonicalize(p)?
    } else {
        p.to_path_buf()
    };
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = nix::fcntl::openat2(nix::fcntl::AT_FDCWD, &p, how)?;
    Ok((p, fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_any_depth_matches_a_bare_pattern_anywhere_and_a_rooted_one_at_the_root() {
        let m = PathMatcher::at_any_depth(&["package.json".into(), "/ci.yml".into()]).unwrap();
        assert!(m.matches(b"sub/pkg/package.json"));
        assert!(m.matches(b"ci.yml"));
        assert!(!m.matches(b"sub/ci.yml"));
    }

    #[test]
    fn escapes_newlines_ansi_and_bidi() {
        assert_eq!(escape_for_humans(b"a\nb"), "a⟦LF⟧b");
        assert_eq!(escape_for_humans(b"\x1b[31mred"), "⟦ESC⟧[31mred");
        assert_eq!(
            escape_for_humans("evil\u{202e}txt.sh".as_bytes()),
            "evil⟦U+202E⟧txt.sh"
        );
        assert_eq!(escape_for_humans(b"bad\xffname"), "bad⟦0xFF⟧name");
        assert_eq!(escape_for_humans("blog/ok-é.md".as_bytes()), "blog/ok-é.md");
        assert_eq!(escape_for_humans(br"a\b"), r"a\b");
    }

    #[test]
    fn directory_semantics() {
        let m = PathMatcher::new(&[".git/".into(), "blog/*.md".into(), "dist/**".into()]).unwrap();
        assert!(m.matches(b".git"));
        assert!(m.matches(b".git/hooks/pre-commit"));
        assert!(!m.matches(b".github/x"));
        assert!(m.matches(b"blog/a.md"));
        assert!(!m.matches(b"blog/index.html"));
        assert!(!m.matches(b"blog/sub/a.md.txt"));
        assert!(m.matches(b"dist"));
        assert!(m.matches(b"dist/a/b"));
        assert!(!m.matches(b"a.md"));
    }

    #[test]
    fn any_depth_semantics() {
        let m = PathMatcher::at_any_depth(&[
            ".git/hooks/".into(),
            ".git/modules/**/config".into(),
            "*.pth".into(),
            "package.json".into(),
            "/Jenkinsfile".into(),
            ".cargo/config*".into(),
        ])
        .unwrap();
        assert!(m.matches(b".git/hooks/pre-commit"));
        assert!(m.matches(b"a/b/.git/hooks/x"));
        assert!(!m.matches(b".git/objects/ab/cd"));
        assert!(m.matches(b".git/modules/sub/config"));
        assert!(m.matches(b".git/modules/a/modules/b/config"));
        assert!(m.matches(b".venv/lib/python3.12/site-packages/evil.pth"));
        assert!(m.matches(b"evil.pth"));
        assert!(m.matches(b"package.json"));
        assert!(m.matches(b"sub/pkg/package.json"));
        assert!(!m.matches(b"sub/pkg/package.json5"));
        assert!(m.matches(b"Jenkinsfile"));
        assert!(!m.matches(b"sub/Jenkinsfile"));
        assert!(m.matches(b"x/.cargo/config.toml"));
        assert_eq!(m.first_match(b"a/package.json"), Some("package.json"));
        // Intent globs keep their root-anchored meaning.
        let intent = PathMatcher::new(&["package.json".into()]).unwrap();
        assert!(!intent.matches(b"sub/package.json"));
        assert!(matches!(
            PathMatcher::new(&["/x".into()]),
            Err(PatternError::Absolute { .. })
        ));
        assert!(PathMatcher::at_any_depth(&["/".into()]).is_err());
        assert!(PathMatcher::at_any_depth(&["//x".into()]).is_err());
    }

    /// The ancestors looked up one by one, and literal patterns looked up
    /// by equality, match exactly what the pattern and its `/**` twin
    /// matched on the whole path (the form before): the default policy's
    /// protected paths and intent globs, over paths made of their own
    /// names and others, 1 to 7 deep and deeper than MAX_ANCESTORS, and
    /// each pattern placed at several depths with near misses.
    #[test]
    fn ancestors_match_as_the_pattern_and_its_twin_did() {
        #[derive(serde::Deserialize)]
        struct Policy {
            protected_paths: Vec<String>,
        }
        let policy: Policy =
            serde_yaml::from_str(include_str!("../../policies/default.yaml")).unwrap();
        let intent: Vec<String> = ["src/**", "blog/*.md", "dist/", "out/*/x", "**/*.lock"]
            .map(String::from)
            .to_vec();
        let mut names: Vec<String> = ["a", "b", "x.md", "x", "lib.rs", "deep", "config.toml"]
            .map(String::from)
            .to_vec();
        for p in policy.protected_paths.iter().chain(&intent) {
            for c in p.split('/') {
                if !c.is_empty() && !c.contains(['*', '?', '[', '{']) && !names.contains(&c.into())
                {
                    names.push(c.into());
                }
            }
        }
        // The form before: each pattern's glob and its `/**` twin, one set.
        let twins = |m: &PathMatcher| -> (globset::GlobSet, Vec<usize>) {
            let build = |t: &str| build_glob(t).unwrap();
            let mut b = globset::GlobSetBuilder::new();
            let mut index = Vec::new();
            for (g, i) in &m.globs {
                b.add(build(g.glob()));
                index.push(*i);
                if g.glob() != "**" {
                    b.add(build(&format!("{}/**", g.glob())));
                    index.push(*i);
                }
            }
            (b.build().unwrap(), index)
        };
        let matchers = [
            PathMatcher::at_any_depth(&policy.protected_paths).unwrap(),
            PathMatcher::new(&intent).unwrap(),
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: usize| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) as usize % n
        };
        // Random paths, siblings in a row (the walk's order, which the
        // parent memo serves), and paths deeper than MAX_ANCESTORS (looked
        // up through the twins).
        let mut paths: Vec<Vec<u8>> = Vec::new();
        for n in 0..1500 {
            let depth = if n % 25 == 0 {
                MAX_ANCESTORS + 1 + next(8)
            } else {
                1 + next(6)
            };
            let dir: Vec<String> = (0..depth)
                .map(|_| names[next(names.len())].clone())
                .collect();
            for _ in 0..1 + next(3) {
                let mut p = dir.clone();
                p.push(names[next(names.len())].clone());
                paths.push(p.join("/").into_bytes());
            }
            paths.push(dir.join("/").into_bytes());
        }
        // Each pattern as a path, at the root, beneath other directories,
        // with something beneath it, and near misses (a longer last name,
        // the pattern's last names without its first): a literal pattern
        // of several names is matched by equality of the path's tail.
        for p in policy.protected_paths.iter().chain(&intent) {
            let t = p.trim_matches('/');
            let rest = t.split_once('/').map_or("", |(_, r)| r);
            for q in [
                t.to_string(),
                format!("a/{t}"),
                format!("a/b/x.md/{t}"),
                format!("{t}/x"),
                format!("a/b/{t}/deep/x"),
                format!("a/{t}x"),
                format!("a/x{t}"),
                format!("a/b/{rest}"),
            ] {
                paths.push(q.into_bytes());
            }
        }
        let (mut matched, mut missed) = (0, 0);
        for m in &matchers {
            let (set, index) = twins(m);
            for p in &paths {
                let want = set
                    .matches(std::ffi::OsStr::from_bytes(p))
                    .into_iter()
                    .map(|g| index[g])
                    .min();
                let got = m
                    .first_match(p)
                    .map(|t| m.patterns.iter().position(|x| x == t).unwrap());
                assert_eq!(got, want, "{}", String::from_utf8_lossy(p));
                matched += usize::from(want.is_some());
                missed += usize::from(want.is_none());
            }
        }
        // The paths reach both sides of the question.
        assert!(
            matched > 300 && missed > 300,
            "{matched} matched, {missed} not"
        );
    }

    #[test]
    fn rejects_climbing_and_absolute() {
        assert!(matches!(
            PathMatcher::new(&["../x".into()]),
            Err(PatternError::ClimbsOut { .. })
        ));
        assert!(matches!(
            PathMatcher::new(&["a/../../x".into()]),
            Err(PatternError::ClimbsOut { .. })
        ));
        assert!(matches!(
            PathMatcher::new(&["/etc/passwd".into()]),
            Err(PatternError::Absolute { .. })
        ));
        assert!(matches!(
            PathMatcher::new(&["a[".into()]),
            Err(PatternError::Glob { .. })
        ));
    }
}
