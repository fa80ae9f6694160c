//! Every step of the shadow stubs in the sandbox's init, in one place:
//! P1 opens the interpreter, P3 sizes the root for the table and installs
//! the stubs, P7 puts their directory on the command's `PATH`, X5 lets the
//! command write its calls, and after P8 the calls are collected.

use std::os::fd::OwnedFd;
use std::path::Path;

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;

use super::super::spec::SandboxSpec;
use super::super::stubs as stub_files;
use super::super::wire::RehearsalReport;
use super::error::HelperError;
use super::init::RunIds;
use super::{STAGE_EXE, STAGE_SMALL_EXE};

/// The run's stubs as init prepares them (empty when the table has none).
pub(super) struct StubSetup {
    /// This binary, opened while its path is visible (P1).
    interpreter: Option<OwnedFd>,
    /// The build's small stub program beside it, when it is installed
    /// (the scripts' interpreter then).
    small: Option<OwnedFd>,
    /// The image directories of the command's `PATH`: stubs cover copies of
    /// their tools there too, and go on `PATH` just before the first of them.
    image_path_dirs: Vec<String>,
    /// Tools shadowed (after P3).
    tools: Vec<String>,
}

impl StubSetup {
    /// P1: open the stubs' interpreter through this namespace's mounts while
    /// its path is still visible (P2 covers /tmp), and serialize the table.
    pub(super) fn open_interpreter(spec: &SandboxSpec, ids: &RunIds) -> Result<Self, HelperError> {
        let mut setup = StubSetup {
            interpreter: None,
            small: None,
            image_path_dirs: Vec::new(),
            tools: Vec::new(),
        };
        if spec.stubs.tools.is_empty() {
            return Ok(setup);
        }
        // Tools to shadow and no table to answer for them: the engine could
        // not serialize it, and stubs without it would fail every call.
        if spec.stubs.table.is_none() {
            return Err(HelperError::StubTable(serde::de::Error::custom(
                "the run names tools to stub but carries no table",
            )));
        }
        let exe = if ids.shifted {
            open(STAGE_EXE, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(std::io::Error::from)
        } else {
            stub_files::open_own_exe()
        };
        setup.interpreter = Some(exe.map_err(|source| HelperError::StubInterpreter { source })?);
        // H5 staged it when H3 found it (root plan); else it is looked for
        // beside this binary now.
        setup.small = if ids.shifted {
            open(
                STAGE_SMALL_EXE,
                OFlag::O_PATH | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .ok()
        } else {
            stub_files::open_small_stub()
        };
        let command_path = spec
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map_or("", |(_, v)| v.as_str());
        setup.image_path_dirs = stub_files::image_path_dirs(command_path, &spec.workspace);
        Ok(setup)
    }

    /// P3: room the root tmpfs needs for the table (a replay's holds every
    /// recorded call) and a page per script.
    pub(super) fn root_room(&self, spec: &SandboxSpec) -> u64 {
        if self.interpreter.is_none() {
            return 0;
        }
        spec.stubs.table_json().len() as u64 + spec.stubs.tools.len() as u64 * 4096 + 4096
    }

    /// After P4 (and the services): install the stubs under `root`, whose
    /// recursive bind of the real tools then carries every mask, filtered
    /// file and layer the command's own paths show, and nothing else.
    pub(super) fn install(
        &mut self,
        spec: &SandboxSpec,
        root: &Path,
        ids: &RunIds,
    ) -> Result<(), HelperError> {
        let Some(exe) = &self.interpreter else {
            return Ok(());
        };
        stub_files::install_stubs(
            root,
            &spec.stubs.tools,
            spec.stubs.table_json().as_bytes(),
            stub_files::Interpreters {
                dryrun: exe,
                small: self.small.as_ref(),
            },
            ids.uid,
            ids.gid,
            &self.image_path_dirs,
        )
        .map_err(HelperError::Stubs)?;
        self.tools = spec.stubs.tools.clone();
        Ok(())
    }

    pub(super) fn active(&self) -> bool {
        !self.tools.is_empty()
    }

    /// P7: the command's `PATH` with the stubs' directory just before the
    /// first image directory (stubbed tools are found before the image's
    /// copies, also those the host lacks).
    pub(super) fn command_path(&self, path: &str) -> String {
        if self.active() {
            stub_files::path_with_stubs(path, &self.image_path_dirs)
        } else {
            path.to_string()
        }
    }

    /// X5: the directory the command may write its call records to.
    pub(super) fn calls_dir(&self) -> Option<&'static Path> {
        self.active().then_some(Path::new(stub_files::CALLS_DIR))
    }

    /// What the record says about the stubs (before P8).
    pub(super) fn describe(&self, report: &mut RehearsalReport) {
        for t in &self.tools {
            report.stripped.push(format!("stub:{t}"));
        }
        if self.active() {
            report.enforcement.push(format!(
                "stubs: {} shadowed by {} (on PATH first and over each copy in the image)",
                self.tools.join(", "),
                stub_files::STUB_BIN_DIR
            ));
        }
        report.stubbed_tools = self.tools.clone();
    }

    /// After P8: the calls the stubs answered (the would-be actions).
    pub(super) fn collect_calls(&self, spec: &SandboxSpec, report: &mut RehearsalReport) {
        if self.active() {
            let (actions, dropped) = stub_files::collect_calls(&spec.stubs);
            report.would_be_actions = actions;
            report.would_be_actions_dropped = dropped;
        }
    }
}
