//! `HelperError`: why the sandbox could not be built, one variant per
//! numbered step (docs/design.md lists them), each with the context that
//! step has. The `E` frame carries the step label (`P2 upper`) and the
//! message separately; the engine shows them as
//! `sandbox setup failed at step P2 upper: ...`.

use std::fmt;
use std::io;
use std::path::PathBuf;

use super::super::landlock::LandlockError;
use super::super::mounts::MountError;
use super::super::seccomp::SeccompError;
use super::super::stubs::StubInstallError;
use super::super::walk::DiffError;

/// The numbered steps of the helper (H: host side, C: child, P: the
/// sandbox's init, X: the command before exec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    H1,
    H2,
    H3,
    H4,
    H5,
    H6,
    C,
    /// The init process before its first numbered step.
    P,
    P1,
    P2,
    P3,
    P4,
    P5,
    P6,
    P7,
    P8,
    P9,
    X5,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A filesystem step's failure: the operation and the path it was on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FsError {
    #[error(transparent)]
    Mount(#[from] MountError),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

impl FsError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> FsError {
        let path = path.into();
        move |source| FsError::Io { path, source }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum HelperError {
    // ---- H1: take over the process, read the spec
    #[error("{op}: {source}")]
    TakeOver { op: &'static str, source: io::Error },
    #[error("the spec is not valid: {0}")]
    Spec(#[source] serde_json::Error),
    #[error("the engine that started this helper is gone")]
    EngineGone,
    // ---- H2: cgroups
    #[error("{0}")]
    Cgroups(#[source] io::Error),
    // ---- H3: private mount namespace, detached clone of the workspace
    #[error("{op} {path}: {source}")]
    CloneWorkspace {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(
        "the workspace path now leads to another directory (device/inode {got:?}, checked {expected:?}): it was swapped after the check; nothing ran"
    )]
    WorkspaceSwapped {
        step: Step,
        got: (u64, u64),
        expected: (u64, u64),
    },
    #[error("{op} {path}: {source}")]
    StageView {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    // ---- H4: fork C, id maps
    #[error("{op}: {source}")]
    ForkChild { op: &'static str, source: io::Error },
    #[error("the sandbox process died before creating its user namespace")]
    ChildDiedEarly,
    #[error("writing the id maps of process {pid}: {source}")]
    IdMaps { pid: i32, source: io::Error },
    // ---- H5: idmapped lower layer
    #[error("{op} {target}: {source}")]
    IdmapLower {
        op: &'static str,
        target: PathBuf,
        source: io::Error,
    },
    // ---- H6: release, watch, answer
    #[error("{op}: {source}")]
    Watch { op: &'static str, source: io::Error },
    // ---- C: user namespace, the other namespaces, fork P1
    #[error("{op}: {source}")]
    Namespaces { op: &'static str, source: io::Error },
    #[error("the host side of the helper is gone")]
    HostGone,
    #[error("the host side of the helper gave up")]
    HostGaveUp,
    #[error("joining the run's cgroups: {0}")]
    CgroupsNotJoined(#[source] io::Error),
    // ---- P: the init process itself
    #[error("{op}: {source}")]
    BecomeInit { op: &'static str, source: io::Error },
    // ---- P1: lower layer
    #[error("{op} {path}: {source}")]
    OpenLower {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{op} {path}: {source}")]
    OpenView {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    // ---- P2: upper layer
    #[error("{source}")]
    UpperLayer { op: &'static str, source: FsError },
    // ---- P3: image root
    #[error("{source}")]
    ImageRoot { op: &'static str, source: FsError },
    // ---- P1/P3: shadow stubs
    #[error("{source}")]
    StubInterpreter { source: io::Error },
    #[error("{0}")]
    StubTable(#[source] serde_json::Error),
    #[error("{0}")]
    Stubs(#[source] StubInstallError),
    // ---- P3: the view (PATH directories, throwaway layers)
    #[error("{source}")]
    View { op: &'static str, source: FsError },
    // ---- P4: /tmp and the workspace overlay
    #[error("{source}")]
    TmpAndOverlay { op: &'static str, source: FsError },
    // ---- P4: masks and filtered files over the view
    #[error("{source}")]
    Masks { op: &'static str, source: FsError },
    #[error(
        "{path} is masked ({rule}) but has {links} names (hard links): the sandbox hides it by its path, so another name would show its content; nothing ran. Remove the other names (find / -xdev -samefile {path}) or keep the file elsewhere"
    )]
    MaskLinked {
        path: PathBuf,
        rule: String,
        links: u64,
    },
    #[error(
        "{path} is masked ({rule}) but was renamed, removed or given another name on the host while the run went on: a new name is not masked, so the command may have read it; the run's output and changes are withheld. Run it again"
    )]
    MaskMoved { path: PathBuf, rule: String },
    // ---- P5: /dev and /proc
    #[error("{source}")]
    DevAndProc { op: &'static str, source: FsError },
    // ---- P6: pivot_root
    #[error("{source}")]
    Pivot { op: &'static str, source: FsError },
    // ---- P7: hostname, loopback, seccomp, environment
    #[error("{op}: {source}")]
    Prepare { op: &'static str, source: io::Error },
    #[error("the kernel offers Landlock ABI {offered}, below the required minimum {required}")]
    LandlockTooOld { offered: u32, required: u32 },
    #[error("{0}")]
    Seccomp(#[source] SeccompError),
    // ---- P8: per step: fork, hand-shake, supervise
    #[error("{op}: {source}")]
    Supervise { op: &'static str, source: io::Error },
    // ---- X5, judged by P1 from what the command's restrict_self returned
    #[error("{0}")]
    Landlock(#[source] LandlockError),
    // ---- P9: evidence and the report
    #[error("{0}")]
    EvidenceReader(#[source] io::Error),
    #[error("{0}")]
    Evidence(#[source] DiffError),
    #[error("{0}")]
    Answer(#[source] io::Error),
}

impl HelperError {
    /// The step this error belongs to.
    pub(crate) fn step(&self) -> Step {
        use HelperError::*;
        match self {
            TakeOver { .. } | Spec(_) | EngineGone => Step::H1,
            Cgroups(_) => Step::H2,
            CloneWorkspace { .. } | StageView { .. } => Step::H3,
            WorkspaceSwapped { step, .. } => *step,
            ForkChild { .. } | ChildDiedEarly | IdMaps { .. } => Step::H4,
            IdmapLower { .. } => Step::H5,
            Watch { .. } => Step::H6,
            Namespaces { .. } | HostGone | HostGaveUp | CgroupsNotJoined(_) => Step::C,
            BecomeInit { .. } => Step::P,
            OpenLower { .. } | StubInterpreter { .. } | OpenView { .. } => Step::P1,
            UpperLayer { .. } => Step::P2,
            ImageRoot { .. } | StubTable(_) | Stubs(_) | View { .. } => Step::P3,
            TmpAndOverlay { .. } | Masks { .. } | MaskLinked { .. } => Step::P4,
            DevAndProc { .. } => Step::P5,
            Pivot { .. } => Step::P6,
            Prepare { .. } | LandlockTooOld { .. } | Seccomp(_) => Step::P7,
            Supervise { .. } | MaskMoved { .. } => Step::P8,
            Landlock(_) => Step::X5,
            EvidenceReader(_) | Evidence(_) | Answer(_) => Step::P9,
        }
    }

    /// What within the step failed, when the step does several things.
    fn operation(&self) -> Option<&'static str> {
        use HelperError::*;
        match self {
            TakeOver { op, .. }
            | CloneWorkspace { op, .. }
            | StageView { op, .. }
            | OpenView { op, .. }
            | View { op, .. }
            | Masks { op, .. }
            | ForkChild { op, .. }
            | IdmapLower { op, .. }
            | Watch { op, .. }
            | Namespaces { op, .. }
            | BecomeInit { op, .. }
            | OpenLower { op, .. }
            | UpperLayer { op, .. }
            | ImageRoot { op, .. }
            | TmpAndOverlay { op, .. }
            | DevAndProc { op, .. }
            | Pivot { op, .. }
            | Prepare { op, .. }
            | Supervise { op, .. } => (!op.is_empty()).then_some(*op),
            Spec(_) => Some("parse spec"),
            Cgroups(_) | CgroupsNotJoined(_) => Some("cgroups"),
            IdMaps { .. } => Some("id maps"),
            StubInterpreter { .. } => Some("stub interpreter"),
            StubTable(_) => Some("stub table"),
            Stubs(_) => Some("stubs"),
            LandlockTooOld { .. } | Landlock(_) => Some("landlock"),
            Seccomp(_) => Some("seccomp"),
            EvidenceReader(_) => Some("evidence reader"),
            Evidence(_) => Some("evidence"),
            Answer(_) => Some("answer"),
            MaskLinked { .. } | MaskMoved { .. } => Some("masks"),
            EngineGone | WorkspaceSwapped { .. } | ChildDiedEarly | HostGone | HostGaveUp => None,
        }
    }

    /// The label the `E` frame carries: the step, then the operation
    /// (`H3 open_tree workspace`, `P2 upper`, `C`).
    pub(crate) fn stage(&self) -> String {
        match self.operation() {
            Some(op) => format!("{} {op}", self.step()),
            None => self.step().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_labels_keep_the_step_names_the_records_show() {
        let e = HelperError::UpperLayer {
            op: "upper",
            source: FsError::Io {
                path: "/tmp/upper".into(),
                source: io::Error::from_raw_os_error(libc::ENOSPC),
            },
        };
        assert_eq!(e.stage(), "P2 upper");
        assert!(e.to_string().starts_with("/tmp/upper: "), "{e}");
        assert_eq!(HelperError::EngineGone.stage(), "H1");
        let swapped = HelperError::WorkspaceSwapped {
            step: Step::P1,
            got: (1, 2),
            expected: (1, 3),
        };
        assert_eq!(swapped.stage(), "P1");
        assert!(swapped.to_string().contains("swapped"));
        let ll = HelperError::LandlockTooOld {
            offered: 3,
            required: 4,
        };
        assert_eq!(ll.stage(), "P7 landlock");
        let spec = HelperError::Spec(serde_json::from_str::<u32>("x").unwrap_err());
        assert_eq!(spec.stage(), "H1 parse spec");
    }
}
