//! Making a policy cheap to load in a short-lived process (a CLI run):
//! rule regexes compile at their first use, the protected-path set at its
//! first look-up (`workspace::paths`), and the parsed system layers are kept
//! in a cache file under the state directory so the next run reads compact
//! JSON instead of parsing ~1,900 lines of YAML.
//!
//! The cache file is host-side state the engine trusts as much as its run
//! records, so it is handled like them:
//! - it lives in `STATE_DIR/cache/`, a directory that must be owned by the
//!   process's effective uid (or root) and writable by nobody else; any
//!   other directory is not used (the policy is then parsed from YAML);
//! - it is opened without following a symlink, must be a regular file of
//!   the same owner, not group- or world-writable, of at most
//!   [`CACHE_MAX_BYTES`];
//! - it is keyed by the BLAKE3 of the binary's version, the cache format
//!   and every layer's name and text (what is on disk now, read this run),
//!   and carries the BLAKE3 of its payload: a key or digest mismatch, a
//!   payload that does not deserialize exactly into policy files, or layer
//!   names that differ, and the file is ignored and rewritten from YAML;
//! - what it holds is the parsed files, not a verdict: the merge and every
//!   check of `Policy::merge` run again on it; only the rule regexes are not
//!   compiled up front (they were when the file was written), and one that
//!   does not compile at its first use matches every argument (fails closed:
//!   the rule's finding is added).
//!
//! Writing is best effort and not fsync'd: a lost or torn cache is rebuilt.
//! The workspace's own layer (agent-writable) is never cached: it is small
//! and parsed every run.

use super::{Policy, PolicyError, PolicyFile, content_hash, parse_file};
use regex::Regex;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::OnceLock;

/// The largest cache file read (the default policy's is ~100 KiB).
pub(crate) const CACHE_MAX_BYTES: u64 = 4 << 20;
const MAGIC: &[u8] = b"dryrun-policy-cache/1\n";
const FILE_NAME: &str = "policy-layers.json";

/// A rule's `arg_regex`: compiled when its policy was validated, or (read
/// back from the cache) at its first use.
#[derive(Debug, Clone)]
pub struct RuleRegex {
    source: String,
    /// `None`: the pattern did not compile (only possible for a tampered
    /// cache); the rule then matches every argument.
    compiled: OnceLock<Option<Regex>>,
}

impl RuleRegex {
    pub(crate) fn compile(source: &str) -> Result<Self, regex::Error> {
        let re = Regex::new(source)?;
        Ok(RuleRegex {
            source: source.to_string(),
            compiled: OnceLock::from(Some(re)),
        })
    }

    pub(crate) fn at_first_use(source: &str) -> Self {
        RuleRegex {
            source: source.to_string(),
            compiled: OnceLock::new(),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether `text` matches; a pattern that does not compile matches.
    pub fn is_match(&self, text: &str) -> bool {
        match self.compiled.get_or_init(|| Regex::new(&self.source).ok()) {
            Some(re) => re.is_match(text),
            None => true,
        }
    }
}

/// [`Policy::layered`] with the free layers' parse kept in
/// `state_dir/cache/`.
pub(crate) fn layered_via_disk(
    state_dir: &Path,
    files: &[(String, String)],
    tighten_only: Option<&(String, String)>,
) -> Result<Policy, PolicyError> {
    let key = cache_key(files);
    let dir = state_dir.join("cache");
    let cached = private_dir(&dir).and_then(|d| read_cache(&d, &key, files));
    let tighten = match tighten_only {
        Some((name, text)) => Some((name.clone(), parse_file(name, text)?)),
        None => None,
    };
    let hash = content_hash(files, tighten_only);
    if let Some(parsed) = cached {
        return Policy::merge(&parsed, tighten.as_ref(), hash, false);
    }
    let parsed = files
        .iter()
        .map(|(name, text)| Ok((name.clone(), parse_file(name, text)?)))
        .collect::<Result<Vec<_>, PolicyError>>()?;
    let policy = Policy::merge(&parsed, tighten.as_ref(), hash, true)?;
    // Only layers that validated (regexes compiled) are written.
    if let Err(e) = write_cache(&dir, &key, &parsed) {
        tracing::debug!(dir = %dir.display(), error = %e, "policy cache not written");
    }
    Ok(policy)
}

fn cache_key(files: &[(String, String)]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(MAGIC);
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.update(&(files.len() as u64).to_le_bytes());
    for (name, text) in files {
        for part in [name.as_bytes(), text.as_bytes()] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part);
        }
    }
    *h.finalize().as_bytes()
}

/// `dir`, created 0700 if missing, if it is a real directory owned by
/// this process's effective uid or root and writable by no one else.
fn private_dir(dir: &Path) -> Option<std::fs::File> {
    let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .ok()?;
    let md = f.metadata().ok()?;
    trusted_owner(&md).then_some(f)
}

fn trusted_owner(md: &std::fs::Metadata) -> bool {
    let euid = nix::unistd::geteuid().as_raw();
    (md.uid() == euid || md.uid() == 0) && md.permissions().mode() & 0o022 == 0
}

fn read_cache(
    dir: &std::fs::File,
    key: &[u8; 32],
    files: &[(String, String)],
) -> Option<Vec<(String, PolicyFile)>> {
    use std::os::fd::AsFd;
    let fd = nix::fcntl::openat(
        dir.as_fd(),
        FILE_NAME,
        nix::fcntl::OFlag::O_RDONLY
            | nix::fcntl::OFlag::O_NOFOLLOW
            | nix::fcntl::OFlag::O_NONBLOCK
            | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()?;
    let f = std::fs::File::from(fd);
    let md = f.metadata().ok()?;
    if !md.file_type().is_file() || !trusted_owner(&md) || md.len() > CACHE_MAX_BYTES {
        return None;
    }
    let mut bytes = Vec::with_capacity(md.len() as usize);
    f.take(CACHE_MAX_BYTES + 1).read_to_end(&mut bytes).ok()?;
    let rest = bytes.strip_prefix(MAGIC)?;
    if rest.len() < 64 || rest[..32] != key[..] {
        return None;
    }
    let (digest, payload) = rest[32..].split_at(32);
    if blake3::hash(payload).as_bytes()[..] != digest[..] {
        return None;
    }
    let parsed: Vec<(String, PolicyFile)> = serde_json::from_slice(payload).ok()?;
    let same_names =
        parsed.len() == files.len() && parsed.iter().zip(files).all(|((a, _), (b, _))| a == b);
    same_names.then_some(parsed)
}

fn write_cache(dir: &Path, key: &[u8; 32], parsed: &[(String, PolicyFile)]) -> std::io::Result<()> {
    if private_dir(dir).is_none() {
        return Err(std::io::Error::other("not a private directory"));
    }
    let payload = serde_json::to_vec(parsed).map_err(std::io::Error::other)?;
    let tmp = dir.join(format!(".{FILE_NAME}.{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    let written = f
        .write_all(MAGIC)
        .and_then(|()| f.write_all(key))
        .and_then(|()| f.write_all(blake3::hash(&payload).as_bytes()))
        .and_then(|()| f.write_all(&payload))
        .and_then(|()| std::fs::rename(&tmp, dir.join(FILE_NAME)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

impl<'de> serde::Deserialize<'de> for super::OneOrMany {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = super::OneOrMany;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<super::OneOrMany, E> {
                Ok(super::OneOrMany::One(v.to_string()))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<super::OneOrMany, E> {
                Ok(super::OneOrMany::None)
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<super::OneOrMany, E> {
                Ok(super::OneOrMany::None)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<super::OneOrMany, A::Error> {
                let mut v = Vec::new();
                while let Some(s) = a.next_element::<String>()? {
                    v.push(s);
                }
                Ok(super::OneOrMany::Many(v))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> Vec<(String, String)> {
        vec![
            (
                "policies/default.yaml".into(),
                super::super::DEFAULT_POLICY_YAML.into(),
            ),
            (
                "policies/stubs.yaml".into(),
                super::super::STUBS_POLICY_YAML.into(),
            ),
        ]
    }

    fn rule_score(p: &Policy, id: &str) -> u32 {
        p.rules.iter().find(|r| r.id == id).expect("rule").score
    }

    #[test]
    fn the_cache_round_trips_the_parsed_layers_exactly() {
        let files = shipped();
        let parsed: Vec<(String, PolicyFile)> = files
            .iter()
            .map(|(n, t)| (n.clone(), parse_file(n, t).unwrap()))
            .collect();
        let json = serde_json::to_vec(&parsed).unwrap();
        let back: Vec<(String, PolicyFile)> = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, parsed);
    }

    #[test]
    fn a_cached_policy_equals_a_parsed_one_and_a_tampered_cache_is_rebuilt() {
        let state = tempfile::tempdir().unwrap();
        let files = shipped();
        let fresh = Policy::layered(&files, None).unwrap();
        let first = layered_via_disk(state.path(), &files, None).unwrap();
        let path = state.path().join("cache").join(FILE_NAME);
        assert!(path.is_file(), "the cache was written");
        let second = layered_via_disk(state.path(), &files, None).unwrap();
        for p in [&first, &second] {
            assert_eq!(p.hash, fresh.hash);
            assert_eq!(p.rules.len(), fresh.rules.len());
            assert_eq!(p.protected_paths, fresh.protected_paths);
            assert_eq!(p.stubs.len(), fresh.stubs.len());
        }
        let id = fresh.rules[0].id.clone();
        let score = rule_score(&fresh, &id);
        // An edited payload (a rule's score lowered) under the old digest.
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let needle = format!("\"score\":{score}");
        assert!(text.contains(&needle));
        std::fs::write(&path, text.replacen(&needle, "\"score\":0", 1)).unwrap();
        let p = layered_via_disk(state.path(), &files, None).unwrap();
        assert_eq!(
            rule_score(&p, &id),
            score,
            "a tampered cache is not trusted"
        );
        // ...and it was rewritten: the next read hits a valid cache again.
        assert!(
            read_cache(
                &private_dir(&path.with_file_name("")).unwrap(),
                &cache_key(&files),
                &files
            )
            .is_some()
        );
        // A cache of other layers (another version or other texts) is not used.
        let mut other = files.clone();
        other[1].1.push_str("\n# edited\n");
        assert!(
            read_cache(
                &private_dir(&path.with_file_name("")).unwrap(),
                &cache_key(&other),
                &other
            )
            .is_none()
        );
    }

    #[test]
    fn a_cache_in_a_shared_directory_or_behind_a_symlink_is_not_read() {
        let state = tempfile::tempdir().unwrap();
        let files = shipped();
        layered_via_disk(state.path(), &files, None).unwrap();
        let dir = state.path().join("cache");
        let key = cache_key(&files);
        assert!(read_cache(&private_dir(&dir).unwrap(), &key, &files).is_some());
        // Group-writable directory: not used at all.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert!(private_dir(&dir).is_none());
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        // A symlink in the file's place is not followed.
        let real = state.path().join("elsewhere.json");
        std::fs::rename(dir.join(FILE_NAME), &real).unwrap();
        std::os::unix::fs::symlink(&real, dir.join(FILE_NAME)).unwrap();
        assert!(read_cache(&private_dir(&dir).unwrap(), &key, &files).is_none());
        // A world-writable cache file is not read.
        std::fs::remove_file(dir.join(FILE_NAME)).unwrap();
        std::fs::rename(&real, dir.join(FILE_NAME)).unwrap();
        std::fs::set_permissions(dir.join(FILE_NAME), std::fs::Permissions::from_mode(0o666))
            .unwrap();
        assert!(read_cache(&private_dir(&dir).unwrap(), &key, &files).is_none());
    }

    #[test]
    fn a_regex_that_does_not_compile_at_first_use_matches() {
        let bad = RuleRegex::at_first_use("(unclosed");
        assert!(bad.is_match("anything"));
        let good = RuleRegex::at_first_use("^--force");
        assert!(good.is_match("--force-with-lease"));
        assert!(!good.is_match("--dry-run"));
    }
}
