//! Making a policy cheap to load in a short-lived process (a CLI run).
//! The system layers (the shipped default and `/etc/dryrun/policy.d`, ~1,900
//! lines of YAML; not agent-writable) are merged and validated once
//! (`merge.rs`'s [`Merged`], with its command index) and the result is
//! kept in a cache file under the state directory, in a compact binary
//! form (postcard). A run then reads that back, parses only the
//! workspace's own layer (agent-writable, small: parsed and checked every
//! run, never cached) and adds it with the same function a full merge uses.
//! Rule regexes of a cached merge compile at their first use, the
//! protected-path set at its first look-up (`workspace::paths`), once per
//! policy. (A daemon also keeps each policy it loaded in memory, keyed by
//! every layer's text: `Policy::load_cached`.)
//!
//! The cache file is host-side state the engine trusts as much as its run
//! records, so it is handled like them:
//! - it lives in `STATE_DIR/cache/`, a directory that must be owned by the
//!   process's effective uid (or root) and writable by nobody else; any
//!   other directory is not used (the policy is then merged from YAML);
//! - it is opened without following a symlink, must be a regular file of
//!   the same owner, not group- or world-writable, of at most
//!   [`CACHE_MAX_BYTES`];
//! - it is keyed by the BLAKE3 of the build (a hash of its sources), the cache format
//!   and every system layer's name and text (what is on disk now, read this
//!   run), and carries the BLAKE3 of its payload: a key or digest mismatch,
//!   a payload that does not deserialize exactly (trailing bytes included),
//!   layer names that differ, a command index that does not cover the
//!   rules exactly, or an `egress:` section that no longer parses, and the
//!   file is ignored and rewritten from YAML;
//! - what it holds is a merge that passed every check when it was written
//!   (only a valid merge is written). It is not checked again: whoever can
//!   write it can write the run records and the journal's head too. A rule
//!   regex that does not compile at its first use (only possible for a
//!   cache rewritten by hand, digest included) matches every argument
//!   (fails closed: the rule's finding is added).
//!
//! Writing is best effort and not fsync'd: a lost or torn cache is rebuilt.

use super::merge::Merged;
use super::{LayerDigests, Policy, PolicyError, parse_file};
use regex::Regex;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// The largest cache file read (the default policy's is ~70 KiB).
pub(crate) const CACHE_MAX_BYTES: u64 = 4 << 20;
const MAGIC: &[u8] = b"dryrun-policy-cache/4 merged postcard\n";
const FILE_NAME: &str = "policy-system.bin";
/// The previous format's file (parsed layers as JSON), removed when the
/// new one is written.
const OLD_FILE_NAME: &str = "policy-layers.json";

/// A rule's `arg_regex`: compiled when its layer was validated, or (read
/// back from the cache) at its first use; clones share the compiled form.
#[derive(Debug, Clone)]
pub struct RuleRegex {
    source: String,
    /// `None`: the pattern did not compile (only possible for a tampered
    /// cache); the rule then matches every argument.
    compiled: Arc<OnceLock<Option<Regex>>>,
}

impl RuleRegex {
    pub(crate) fn compile(source: &str) -> Result<Self, regex::Error> {
        let re = Regex::new(source)?;
        Ok(RuleRegex {
            source: source.to_string(),
            compiled: Arc::new(OnceLock::from(Some(re))),
        })
    }

    pub(crate) fn at_first_use(source: String) -> Self {
        RuleRegex {
            source,
            compiled: Arc::new(OnceLock::new()),
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

/// As its source text; read back, it compiles at its first use.
impl serde::Serialize for RuleRegex {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

impl<'de> serde::Deserialize<'de> for RuleRegex {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(RuleRegex::at_first_use)
    }
}

/// [`Policy::layered`] with the system layers' merge kept in
/// `state_dir/cache/`: only the workspace layer is parsed and added.
/// (In a daemon, `Policy::load_cached` keeps each resulting policy.)
#[cfg(test)]
pub(crate) fn layered_via_disk(
    state_dir: &Path,
    files: &[(String, String)],
    tighten_only: Option<&(String, String)>,
    digests: LayerDigests,
) -> Result<Policy, PolicyError> {
    let system = system_merged(state_dir, files, &cache_key(&digests.system_key))?;
    with_workspace_layer(system, tighten_only, digests.hash)
}

/// [`layered_via_disk`] with any number of tighten-only layers (a fleet
/// host's own files, then the workspace's), added in order.
pub(crate) fn layered_via_disk_all(
    state_dir: &Path,
    files: &[(String, String)],
    tighten: &[(String, String)],
    digests: LayerDigests,
) -> Result<Policy, PolicyError> {
    let mut m = system_merged(state_dir, files, &cache_key(&digests.system_key))?;
    for (name, text) in tighten {
        m.add_workspace_layer(name, &parse_file(name, text)?)?;
    }
    Ok(m.into_policy(digests.hash))
}

/// `m` (the merge of the system layers) with the workspace's layer added:
/// the same result as [`Policy::layered`] over all of them (`hash`: of
/// every layer, see `layer_digests`).
#[cfg(test)]
fn with_workspace_layer(
    mut m: Merged,
    tighten_only: Option<&(String, String)>,
    hash: String,
) -> Result<Policy, PolicyError> {
    if let Some((name, text)) = tighten_only {
        m.add_workspace_layer(name, &parse_file(name, text)?)?;
    }
    Ok(m.into_policy(hash))
}

/// The system layers merged: read back from the cache file, or merged from
/// YAML (and the cache file written).
fn system_merged(
    state_dir: &Path,
    files: &[(String, String)],
    key: &[u8; 32],
) -> Result<Merged, PolicyError> {
    let dir = state_dir.join("cache");
    if let Some(m) = private_dir(&dir).and_then(|d| read_cache(&d, key, files)) {
        return Ok(m);
    }
    let mut m = Merged::new();
    for (name, text) in files {
        m.add_system_layer(name, &parse_file(name, text)?)?;
    }
    m.index_commands();
    // Only a merge that passed every check is written.
    if let Err(e) = write_cache(&dir, key, &m) {
        tracing::debug!(dir = %dir.display(), error = %e, "policy cache not written");
    }
    Ok(m)
}

/// The cache file's key: the format, the build (a hash of the sources,
/// `build.rs`: two builds of one version may lay out the merge
/// differently, and a layout that still deserializes could mean something
/// else) and the system layers' names and texts (`system_key`, see
/// `layer_digests`).
fn cache_key(system_key: &[u8; 32]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(MAGIC);
    h.update(crate::model::stubs::BUILD_ID.as_bytes());
    h.update(system_key);
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

fn read_cache(dir: &std::fs::File, key: &[u8; 32], files: &[(String, String)]) -> Option<Merged> {
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
    let (mut m, trailing): (Merged, _) = postcard::take_from_bytes(payload).ok()?;
    let same_names =
        m.sources().len() == files.len() && m.sources().iter().zip(files).all(|(a, (b, _))| a == b);
    if !trailing.is_empty() || !same_names || !m.index_is_sound() {
        return None;
    }
    m.rebuild_egress()?;
    Some(m)
}

fn write_cache(dir: &Path, key: &[u8; 32], merged: &Merged) -> std::io::Result<()> {
    if private_dir(dir).is_none() {
        return Err(std::io::Error::other("not a private directory"));
    }
    let payload = postcard::to_stdvec(merged).map_err(std::io::Error::other)?;
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
    let _ = std::fs::remove_file(dir.join(OLD_FILE_NAME));
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
    use super::super::{content_hash, layer_digests};
    use super::*;

    fn key_of(files: &[(String, String)]) -> [u8; 32] {
        cache_key(&layer_digests(files, None).system_key)
    }

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

    /// A system layer on top of the shipped ones (egress, thresholds, a
    /// replaced rule), so the cached merge carries every kind of section.
    fn with_system_layer() -> Vec<(String, String)> {
        let mut files = shipped();
        files.push((
            "/etc/dryrun/policy.d/site.yaml".into(),
            "thresholds: {approval: 45, block: 85}\nprotected_paths: [\"deploy/\"]\negress:\n  always_allow: [\"mirror.internal\"]\n  never_allow: [\"*.paste.example\"]\n  resolve: [\"mirror.internal:443:10.0.0.7\"]\nrules:\n  - id: site.terraform\n    match: {command: terraform, subcommand: apply, arg_regex: \"^-auto-approve\"}\n    level: IRREVERSIBLE\n    score: 90\n    reason: changes the site's infrastructure\n    approval: true\n".into(),
        ));
        files
    }

    fn ws(text: &str) -> (String, String) {
        (".dryrun/policy.yaml".into(), text.into())
    }

    /// Workspace layers that are accepted or refused, each kind of section.
    fn workspace_layers(p: &Policy) -> Vec<Option<(String, String)>> {
        // A shipped rule that can be both raised and lowered.
        let r = p
            .rules
            .iter()
            .find(|r| r.level > super::super::Level::Read && r.score > 0 && r.score < 100)
            .expect("such a rule");
        let rule = |cmds: &[String], level: &str, score: u32, extra: &str| {
            let subs: Vec<String> = r.subcommands.iter().map(|s| s.join(" ")).collect();
            let sub = match subs.is_empty() {
                true => String::new(),
                false => format!(", subcommand: {subs:?}"),
            };
            let re = match &r.arg_regex {
                Some(x) => format!(", arg_regex: {:?}", x.as_str()),
                None => String::new(),
            };
            format!(
                "rules:\n  - id: {}\n    match: {{command: {cmds:?}{sub}, flags_any: {:?}, flags_all: {:?}{re}}}\n    level: {level}\n    score: {score}\n    reason: x\n    approval: {}\n{extra}",
                r.id, r.flags_any, r.flags_all, r.approval
            )
        };
        let cmd = &r.commands[..];
        let other = ["zz-other".to_string()];
        vec![
            None,
            Some(ws("rules: []\n")),
            // Allow-ish: a new rule, lower thresholds, a protected path.
            Some(ws(
                "thresholds: {approval: 30, block: 60}\nprotected_paths: [\"secrets/\", \"/top.env\"]\nrules:\n  - id: local.deploy\n    match: {command: [deploy, ship], arg_regex: \"--prod\"}\n    level: ADMIN\n    score: 70\n    reason: deploys leave the machine\n",
            )),
            // A shipped rule raised (the same match), and a built-in check.
            Some(ws(&rule(
                cmd,
                "IRREVERSIBLE",
                100,
                "builtin:\n  exec.unknown: {level: ADMIN, score: 30}\negress: {never_allow: [\"evil.example\"]}\n",
            ))),
            // Refused: a rule lowered, its match changed, thresholds raised,
            // a built-in lowered, stubs, egress allowed, a bad pattern.
            Some(ws(&rule(cmd, "READ", 0, ""))),
            Some(ws(&rule(&other, "IRREVERSIBLE", 100, ""))),
            Some(ws("thresholds: {approval: 99, block: 99}\n")),
            Some(ws("builtin:\n  exec.unknown: {level: READ, score: 0}\n")),
            Some(ws(
                "stubs:\n  x:\n    match: {command: gh}\n    answer: {exit: 0}\n",
            )),
            Some(ws("egress: {always_allow: [\"evil.example\"]}\n")),
            Some(ws("protected_paths: [\"a/[\"]\n")),
            Some(ws(
                "rules:\n  - id: bad\n    match: {command: x, arg_regex: \"(\"}\n    level: READ\n    score: 1\n    reason: x\n",
            )),
            Some(ws("not_a_field: 1\n")),
        ]
    }

    fn outcome(r: Result<Policy, PolicyError>) -> String {
        match r {
            Ok(p) => p.canonical(),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn a_cached_system_merge_plus_the_workspace_layer_equals_the_full_merge() {
        for files in [shipped(), with_system_layer()] {
            let state = tempfile::tempdir().unwrap();
            let key = key_of(&files);
            let fresh = Policy::layered(&files, None).unwrap();
            let layers = workspace_layers(&fresh);
            // Merged from YAML (writes the cache), then read back from it.
            let written = system_merged(state.path(), &files, &key).unwrap();
            let dir = private_dir(&state.path().join("cache")).unwrap();
            let read = read_cache(&dir, &key, &files).expect("the cache was written");
            let mut refused = Vec::new();
            for layer in &layers {
                let full = outcome(Policy::layered(&files, layer.as_ref()));
                if full.starts_with("error:") {
                    refused.push(full.clone());
                }
                for system in [&written, &read] {
                    let hash = content_hash(&files, layer.as_ref());
                    let cut = outcome(with_workspace_layer(system.clone(), layer.as_ref(), hash));
                    assert_eq!(cut, full, "workspace layer {layer:?}");
                }
                let digests = layer_digests(&files, layer.as_ref());
                assert_eq!(digests.hash, content_hash(&files, layer.as_ref()));
                let via = outcome(layered_via_disk(
                    state.path(),
                    &files,
                    layer.as_ref(),
                    digests,
                ));
                assert_eq!(via, full, "workspace layer {layer:?}");
            }
            assert_eq!(refused.len(), 9, "only the refused layers: {refused:#?}");
        }
    }

    #[test]
    fn a_tampered_cache_is_ignored_and_rewritten() {
        let state = tempfile::tempdir().unwrap();
        let files = shipped();
        let key = key_of(&files);
        let full = Policy::layered(&files, None).unwrap().canonical();
        system_merged(state.path(), &files, &key).unwrap();
        let path = state.path().join("cache").join(FILE_NAME);
        let good = std::fs::read(&path).unwrap();
        let dir = || private_dir(&state.path().join("cache")).unwrap();
        // A changed payload byte, a truncated file, trailing bytes (with
        // the digest recomputed), a wrong key in the file.
        let mut flipped = good.clone();
        let last = flipped.len() - 40;
        flipped[last] ^= 0x01;
        let mut trailing = good.clone();
        trailing.push(0);
        let start = MAGIC.len() + 64;
        let digest = *blake3::hash(&trailing[start..]).as_bytes();
        trailing[MAGIC.len() + 32..start].copy_from_slice(&digest);
        let mut wrong_key = good.clone();
        wrong_key[MAGIC.len()] ^= 0x01;
        for bad in [
            flipped,
            good[..good.len() / 2].to_vec(),
            trailing,
            wrong_key,
        ] {
            std::fs::write(&path, &bad).unwrap();
            assert!(read_cache(&dir(), &key, &files).is_none());
            let m = system_merged(state.path(), &files, &key).unwrap();
            let p = with_workspace_layer(m, None, content_hash(&files, None)).unwrap();
            assert_eq!(p.canonical(), full, "a tampered cache is not trusted");
            assert_eq!(std::fs::read(&path).unwrap(), good, "and it was rewritten");
        }
    }

    #[test]
    fn a_changed_system_layer_rebuilds_the_cache() {
        let state = tempfile::tempdir().unwrap();
        let files = with_system_layer();
        system_merged(state.path(), &files, &key_of(&files)).unwrap();
        let mut edited = files.clone();
        edited[2].1 = edited[2].1.replace("score: 90", "score: 95");
        let key = key_of(&edited);
        let dir = private_dir(&state.path().join("cache")).unwrap();
        assert!(read_cache(&dir, &key, &edited).is_none(), "other key");
        let m = system_merged(state.path(), &edited, &key).unwrap();
        let p = with_workspace_layer(m, None, content_hash(&edited, None)).unwrap();
        let full = Policy::layered(&edited, None).unwrap();
        assert_eq!(p.canonical(), full.canonical());
        assert_eq!(
            p.rules
                .iter()
                .find(|r| r.id == "site.terraform")
                .unwrap()
                .score,
            95
        );
        assert!(read_cache(&dir, &key, &edited).is_some(), "rewritten");
        // The same key with other layer names (not possible unless forged)
        // is not used either.
        let mut renamed = edited.clone();
        renamed[2].0 = "/etc/dryrun/policy.d/other.yaml".into();
        assert!(read_cache(&dir, &key, &renamed).is_none());
    }

    #[test]
    fn a_cache_in_a_shared_directory_or_behind_a_symlink_is_not_read() {
        let state = tempfile::tempdir().unwrap();
        let files = shipped();
        let key = key_of(&files);
        system_merged(state.path(), &files, &key).unwrap();
        let dir = state.path().join("cache");
        assert!(read_cache(&private_dir(&dir).unwrap(), &key, &files).is_some());
        // Group-writable directory: not used at all.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert!(private_dir(&dir).is_none());
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        // A symlink in the file's place is not followed.
        let real = state.path().join("elsewhere.bin");
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
        let bad = RuleRegex::at_first_use("(unclosed".into());
        assert!(bad.is_match("anything"));
        let good = RuleRegex::at_first_use("^--force".into());
        assert!(good.is_match("--force-with-lease"));
        assert!(!good.is_match("--dry-run"));
    }
}
