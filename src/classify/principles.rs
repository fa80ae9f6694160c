//! The principles every rule comes from (docs/classifier.md, "Principles"):
//! a program is judged by what it can do, and each finding's rule id says
//! which of these capabilities it saw. One table maps rule ids to their
//! principle, so `dryrun classify --explain` and the MCP `classify` tool
//! can say why, not only which rule.

use serde::Serialize;

use crate::policy::Level;

/// What a command can do that a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Principle {
    /// Fail closed: what cannot be parsed or followed is not scored low.
    FailClosed,
    /// It runs other programs: a shell, a command given in an option, a
    /// config file or a script, inline interpreter code.
    RunsPrograms,
    /// What runs cannot be seen statically: a computed or quoted name, a
    /// look-alike program, an encoded payload, code written and run in the
    /// same command.
    HidesWhatRuns,
    /// It deletes, or its targets come from elsewhere.
    Deletes,
    /// It writes or operates outside the workspace (the root, the home,
    /// other directories), which the live lane does not replay.
    WritesOutside,
    /// It reaches the network.
    ReachesNetwork,
    /// It changes remote state (a forge, a registry, a cloud, a cluster, a
    /// database): effects no rehearsal can show or undo.
    ChangesRemoteState,
    /// It changes the agent's own controls: approvals off, settings, hooks,
    /// files that run later.
    ChangesAgentControls,
    /// It acts with privilege or on the system itself.
    UsesPrivilege,
    /// It reads or sends credentials.
    TouchesCredentials,
    /// It changes the workspace: the rehearsal shows exactly what.
    ChangesWorkspace,
    /// A program no rule knows: the considered default (WRITE, judged by
    /// the rehearsal).
    UnknownProgram,
    /// It only reads or only plans.
    OnlyReads,
}

impl Principle {
    /// The principle a finding's rule comes from. `level` decides for the
    /// families whose rules span several (a `vcs.git` rule that only reads
    /// is not a remote change).
    pub fn of(rule: &str, level: Level) -> Principle {
        use Principle::*;
        let first = rule.split('.').next().unwrap_or(rule);
        match rule {
            "exec.unknown" | "exec.path" => return UnknownProgram,
            "exec.lookalike"
            | "exec.written_code"
            | "exec.opaque_code"
            | "exec.unreadable_code"
            | "exec.inline_code.process"
            | "exec.inline_code.native"
            | "exec.inline_code.payload"
            | "exec.inline_code.written" => return HidesWhatRuns,
            "exec.inline_code.delete" => return Deletes,
            "exec.inline_code.write_outside" => return WritesOutside,
            "exec.inline_code.network" => return ReachesNetwork,
            "exec.unknown.verb" => return ChangesRemoteState,
            // What a tool keeps in the user's home (pipx, uv tool, nvm,
            // conda, gems, toolchains, caches) is outside the workspace.
            "pkg.user.remove"
            | "pkg.user.remove.home"
            | "pkg.user.remove.rust"
            | "pkg.user.remove.global"
            | "pkg.user.remove.composer"
            | "pkg.conda.remove"
            | "pkg.cache.clear"
            | "pkg.cache.clear.go"
            | "pkg.nix.gc" => {
                return WritesOutside;
            }
            // The user's Go configuration, which later go commands obey.
            "build.go.env_write" => return WritesOutside,
            // yadm's work tree is the home directory.
            "vcs.yadm.home" => return WritesOutside,
            "exec.schedule.remove" => return Deletes,
            "blast.empty_variable" | "delete.unknown_targets" => return Deletes,
            "blast.root" | "blast.home" | "blast.outside" | "redirect.outside" => {
                return WritesOutside;
            }
            "redirect.device" => return UsesPrivilege,
            "chain.opaque" | "redirect.write" => return ChangesWorkspace,
            "read.plan" => return OnlyReads,
            // Configuration and options that make a tool run a program.
            "vcs.git.config.exec"
            | "vcs.git.config.exec.option"
            | "exec.sed.script"
            | "exec.awk.system"
            | "exec.stdin_program" => return RunsPrograms,
            _ => {}
        }
        if level == Level::Read {
            return OnlyReads;
        }
        match first {
            "parse" => FailClosed,
            "exec" | "shell" => RunsPrograms,
            "obfuscation" => HidesWhatRuns,
            "agent" | "protected" | "persist" => ChangesAgentControls,
            "credential" => TouchesCredentials,
            "exfil" | "net" => ReachesNetwork,
            "system" | "priv" => UsesPrivilege,
            "fs" if rule.starts_with("fs.rm") || rule.contains("delete") || rule == "fs.shred" => {
                Deletes
            }
            "fs" | "build" | "redirect" => ChangesWorkspace,
            "remote" | "infra" | "pkg" | "vcs" | "data" | "cloud" if level >= Level::Admin => {
                ChangesRemoteState
            }
            _ if level >= Level::Admin => ChangesRemoteState,
            _ => ChangesWorkspace,
        }
    }

    /// One sentence for a person.
    pub fn describe(self) -> &'static str {
        use Principle::*;
        match self {
            FailClosed => "fail closed: what cannot be parsed or followed is never scored low",
            RunsPrograms => {
                "runs other programs (a shell, a command given in an option or a file, inline code)"
            }
            HidesWhatRuns => {
                "what runs cannot be seen before it runs (computed, quoted or look-alike names, encoded or just-written code)"
            }
            Deletes => "deletes, or deletes targets that come from elsewhere",
            WritesOutside => {
                "writes or operates outside the workspace, which the live lane does not replay"
            }
            ReachesNetwork => "reaches the network, where data can leave",
            ChangesRemoteState => {
                "changes remote state (forge, registry, cloud, cluster, database) that no rehearsal can show or undo"
            }
            ChangesAgentControls => {
                "changes the agent's own controls (approvals, settings, hooks, files that run later)"
            }
            UsesPrivilege => "acts with privilege or on the system itself",
            TouchesCredentials => "reads or sends credentials",
            ChangesWorkspace => "changes the workspace; the rehearsal shows exactly what",
            UnknownProgram => {
                "a program no rule knows: judged by the rehearsal (the considered default)"
            }
            OnlyReads => "only reads or only plans",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_map_to_their_principles() {
        assert_eq!(
            Principle::of("vcs.git.push", Level::Admin),
            Principle::ChangesRemoteState
        );
        assert_eq!(
            Principle::of("vcs.git.status", Level::Read),
            Principle::OnlyReads
        );
        assert_eq!(
            Principle::of("exec.option.tar", Level::Admin),
            Principle::RunsPrograms
        );
        assert_eq!(
            Principle::of("fs.rm.recursive", Level::Write),
            Principle::Deletes
        );
        assert_eq!(
            Principle::of("parse.error", Level::Admin),
            Principle::FailClosed
        );
        assert_eq!(
            Principle::of("exec.unknown", Level::Write),
            Principle::UnknownProgram
        );
        assert_eq!(
            Principle::of("pkg.user.remove", Level::Admin),
            Principle::WritesOutside
        );
        assert_eq!(
            Principle::of("pkg.user.remove.rust", Level::Admin),
            Principle::WritesOutside
        );
        assert_eq!(
            Principle::of("exec.schedule.remove", Level::Admin),
            Principle::Deletes
        );
        assert_eq!(
            Principle::of("build.go.env_write", Level::Admin),
            Principle::WritesOutside
        );
        assert_eq!(
            Principle::of("vcs.yadm.home", Level::Admin),
            Principle::WritesOutside
        );
    }
}
