//! What the engine hands to the sandbox helper (serialized over a pipe), and
//! the image profiles from `sandbox-images/`.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The default image profile, compiled in so the binary works from anywhere.
pub(crate) const DEFAULT_IMAGE_YAML: &str = include_str!("../../sandbox-images/default.yaml");

/// An image profile: which host trees form the sandbox's read-only root.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ImageProfile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub ro_binds: Vec<PathBuf>,
    #[serde(default)]
    pub mask: Vec<PathBuf>,
    /// The sandbox's host name; absent, the host's own (the new UTS
    /// namespace starts with it), as the live run sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default = "default_tmp_size")]
    pub tmp_size_mb: u64,
}

fn default_tmp_size() -> u64 {
    256
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("image profile {file}: {message}")]
    Invalid { file: String, message: String },
    #[error("image profile {file}: cannot read it: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
}

impl ImageProfile {
    /// The bundled default profile, parsed once per process.
    pub fn default_profile() -> Self {
        static PARSED: std::sync::OnceLock<ImageProfile> = std::sync::OnceLock::new();
        PARSED
            .get_or_init(|| {
                Self::parse("sandbox-images/default.yaml", DEFAULT_IMAGE_YAML)
                    .expect("the bundled default image profile is valid (checked by a unit test)")
            })
            .clone()
    }

    pub fn load(path: &Path) -> Result<Self, ImageError> {
        let text = std::fs::read_to_string(path).map_err(|source| ImageError::Read {
            file: path.display().to_string(),
            source,
        })?;
        Self::parse(&path.display().to_string(), &text)
    }

    pub fn parse(file: &str, text: &str) -> Result<Self, ImageError> {
        let invalid = |message: String| ImageError::Invalid {
            file: file.to_string(),
            message,
        };
        let p: ImageProfile = serde_yaml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        for b in p.ro_binds.iter().chain(p.mask.iter()) {
            if !b.is_absolute() || b.components().any(|c| c == std::path::Component::ParentDir) {
                return Err(invalid(format!(
                    "path {} must be absolute and must not contain '..'",
                    b.display()
                )));
            }
            if b == Path::new("/") {
                return Err(invalid("binding or masking / itself is not allowed".into()));
            }
        }
        for m in &p.mask {
            if !p.ro_binds.iter().any(|b| m.starts_with(b)) {
                return Err(invalid(format!(
                    "mask {} is not inside any ro_binds entry",
                    m.display()
                )));
            }
        }
        if p.tmp_size_mb == 0 || p.tmp_size_mb > 65536 {
            return Err(invalid("tmp_size_mb must be between 1 and 65536".into()));
        }
        if p.hostname
            .as_ref()
            .is_some_and(|h| h.is_empty() || h.len() > 64)
        {
            return Err(invalid("hostname must be 1 to 64 bytes".into()));
        }
        Ok(p)
    }

    /// True when `path` lies inside one of the read-only image trees, where a
    /// workspace cannot be mounted.
    pub fn covers(&self, path: &Path) -> Option<&Path> {
        self.ro_binds
            .iter()
            .find(|b| path.starts_with(b))
            .map(|b| b.as_path())
    }
}

/// How sandbox ids relate to host ids.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum IdPlan {
    /// dryrun runs as root: sandbox ids `0..count` are host ids
    /// `host_base..host_base+count`; the workspace is shown through an
    /// idmapped mount so its owners keep their numbers inside. The command
    /// runs as `run_uid`/`run_gid` (the workspace owner's numbers).
    Shifted {
        host_base: u32,
        count: u32,
        run_uid: u32,
        run_gid: u32,
    },
    /// dryrun runs as an ordinary user: the only id inside is the user's own.
    SelfOnly { uid: u32, gid: u32 },
}

/// Limits in kernel units.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SandboxLimits {
    pub timeout_ms: u64,
    pub memory_bytes: u64,
    pub pids: u64,
    pub output_bytes: u64,
    pub disk_bytes: u64,
    pub tmp_bytes: u64,
    /// CPUs' worth of time per period (the cgroup's CPU quota), and the
    /// factor of the CPU-time rlimit over the wall-clock timeout.
    #[serde(default = "one_cpu")]
    pub cpus: u64,
}

fn one_cpu() -> u64 {
    1
}

/// Bytes of file content one run may keep (blobs), counted at apparent
/// size (`st_size`, so sparse and hole-punched files count in full): the
/// upper layer's size plus room for "before" copies of small modified files,
/// at most 64 MiB of it. A fixed function of `disk_bytes`, which the
/// configured disk ceiling bounds.
pub(crate) fn kept_content_budget(disk_bytes: u64) -> u64 {
    disk_bytes.saturating_add(disk_bytes.min(64 << 20))
}

/// A cgroup v1 plan (root only): directories the helper creates and joins.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CgroupPlan {
    /// `(controller, directory)`, e.g. `("memory", "/sys/fs/cgroup/memory/dryrun/RUN")`.
    pub dirs: Vec<(String, PathBuf)>,
    /// A cgroup v2 directory instead of v1 controllers.
    pub unified: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LandlockPlan {
    /// Refuse to run below this ABI unless `allow_degraded`.
    pub min_abi: u32,
    pub allow_degraded: bool,
}

/// Everything the helper needs; validated by the engine before it is sent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SandboxSpec {
    pub run_id: String,
    pub parent_pid: i32,
    pub workspace: PathBuf,
    pub steps: Vec<String>,
    pub shell: PathBuf,
    pub env: Vec<(String, String)>,
    /// The command's file mode creation mask.
    pub umask: u32,
    pub limits: SandboxLimits,
    pub ids: IdPlan,
    pub image: ImageProfile,
    pub landlock: LandlockPlan,
    pub cgroup: Option<CgroupPlan>,
    /// Keep at most this many bytes of "before" content for text diffs.
    pub diff_before_max: u64,
    /// CLOCK_MONOTONIC (ns) when the engine started the run; phase timings
    /// are relative to it.
    #[serde(default)]
    pub t0_ns: u64,
    /// (st_dev, st_ino) of the workspace directory when the engine checked
    /// it; the helper refuses to mount anything else (a path swapped for a
    /// symlink between the check and the mount).
    pub workspace_identity: (u64, u64),
    /// The workspace is a directory in a client's own mount namespace (a
    /// container): H3 takes its mount from the clone the resident made in
    /// that namespace, never from `workspace` on the host.
    #[serde(default)]
    pub client_view: bool,
    /// The live lane's `rerun` with `live.network: host`: no network
    /// namespace and no Landlock network rules (everything else as in a
    /// rehearsal). Never set for a rehearsal.
    #[serde(default)]
    pub network_host: bool,
    /// The workspace owner's supplementary groups (ids inside the sandbox's
    /// range), held by the evidence walk's reader and by the command, as
    /// the live command holds them (shifted plan only).
    #[serde(default)]
    pub reader_groups: Vec<u32>,
    /// Self plan only: the caller's supplementary groups that `/etc/subgid`
    /// delegates to it, mapped 1:1 into the sandbox through `newgidmap` so
    /// that files of those groups can be changed (see `sandbox::ids`).
    #[serde(default)]
    pub mapped_groups: Vec<u32>,
    /// Shadow stubs for this run (no tools: none installed).
    #[serde(default)]
    pub stubs: StubPlan,
    /// Where the engine's egress waits for the sandbox's sockets: the DNS
    /// responder in every rehearsal, and the proxy in a run whose network
    /// intent allows names. `None` (the live lane's rerun on the host's
    /// network): nothing is served.
    #[serde(default)]
    pub egress: Option<EgressPlan>,
    /// What the command sees of the host besides the image and the
    /// workspace: the home and the scratch trees as throwaway layers, the
    /// `PATH` directories, the masks and the filtered files (`view`).
    #[serde(default)]
    pub view: super::view::ViewSpec,
}

/// A run's stub table as it travels to the sandbox: serialized once, by
/// the engine, and carried through the host side as raw JSON (parsed
/// there only for its syntax, not into rules), to be written into the
/// sandbox's root as the stubs read it; with the tools it shadows, which
/// is all the init needs of it before the command has run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StubPlan {
    /// The tools the table shadows, sorted and without repeats.
    pub tools: Vec<String>,
    /// The table (`StubTable`) as JSON; `None` when it has no rules.
    pub table: Option<Box<serde_json::value::RawValue>>,
}

impl StubPlan {
    pub fn new(table: &crate::model::stubs::StubTable) -> StubPlan {
        if table.rules.is_empty() {
            return StubPlan::default();
        }
        StubPlan {
            tools: table.tools(),
            // Strings, numbers and lists only: serializing cannot fail.
            table: serde_json::value::to_raw_value(table).ok(),
        }
    }

    /// The table's JSON (empty when there are no stubs).
    pub(crate) fn table_json(&self) -> &str {
        self.table
            .as_deref()
            .map_or("", serde_json::value::RawValue::get)
    }

    /// The table itself, parsed again (after the command, to check the
    /// call records against it).
    pub(crate) fn table(&self) -> serde_json::Result<crate::model::stubs::StubTable> {
        match &self.table {
            Some(t) => serde_json::from_str(t.get()),
            None => Ok(Default::default()),
        }
    }
}

impl PartialEq for StubPlan {
    fn eq(&self, other: &Self) -> bool {
        self.tools == other.tools && self.table_json() == other.table_json()
    }
}

/// The sandbox's part of a run's egress (see `helper/egress.rs`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EgressPlan {
    /// The proxy's control socket on the host (reached by H only).
    pub control: PathBuf,
    /// The proxy's port on the sandbox's loopback (in every rehearsal: with
    /// `network: none` the proxy refuses every name).
    pub proxy_port: Option<u16>,
    /// Whether the run's allowlist names anything (the proxy serves names);
    /// `false` with `network: none`.
    #[serde(default)]
    pub allows_names: bool,
    /// The run's admitted host services (`intent.network.services`), in
    /// the order their listeners are handed over: each gets a listener
    /// inside the sandbox at its own address or path (see
    /// `helper/services.rs`), and Landlock lets the command connect to
    /// exactly their TCP ports.
    #[serde(default)]
    pub services: Vec<crate::model::ServiceEndpoint>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_default_profile_is_valid() {
        let p = ImageProfile::default_profile();
        assert!(p.ro_binds.contains(&PathBuf::from("/usr")));
        // The masks, with their reasons, are the view's (`view/table.rs`).
        assert!(p.mask.is_empty());
        assert!(p.covers(Path::new("/usr/src/x")).is_some());
        assert!(p.covers(Path::new("/home/me")).is_none());
    }

    #[test]
    fn profile_rejects_relative_and_stray_masks() {
        let e = ImageProfile::parse("t", "name: x\nro_binds: [usr]\n").unwrap_err();
        assert!(e.to_string().contains("must be absolute"), "{e}");
        let e = ImageProfile::parse("t", "name: x\nro_binds: [/usr]\nmask: [/etc/shadow]\n")
            .unwrap_err();
        assert!(e.to_string().contains("not inside any ro_binds"), "{e}");
        let e = ImageProfile::parse("t", "name: x\nro_binds: [/usr]\nbogus: 1\n").unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
    }
}
