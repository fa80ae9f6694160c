//! docs/configuration.md cannot drift from the code:
//!
//! - its command-line reference (between `<!-- flags:begin -->` and
//!   `<!-- flags:end -->`) is generated from the clap definitions
//!   (`dryrun::cli::command()`), every command and subcommand, every flag
//!   with its value, default, environment variable and help; the test fails
//!   when the page differs, and `DRYRUN_BLESS=1 cargo test --test
//!   docs_reference` writes the block anew;
//! - every `DRYRUN_*` variable the code reads is named on the page;
//! - every key of the policy files, the sandbox images, `dryrun.yaml` and
//!   the envelope (the serde structs' fields, read from the source) is named
//!   in its section of the page.

use std::fmt::Write as _;
use std::path::Path;

const DOC: &str = "docs/configuration.md";
const BEGIN: &str = "<!-- flags:begin -->";
const END: &str = "<!-- flags:end -->";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn doc() -> String {
    std::fs::read_to_string(root().join(DOC)).unwrap()
}

/// A table cell: one line, pipes escaped.
fn cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn flags_of(cmd: &clap::Command, path: &str, out: &mut String) {
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if !args.is_empty() || cmd.get_subcommands().next().is_none() {
        let _ = writeln!(out, "### `{path}`\n");
        if let Some(about) = cmd.get_about() {
            let _ = writeln!(out, "{}\n", cell(&about.to_string()));
        }
        if args.is_empty() {
            let _ = writeln!(out, "No options.\n");
        } else {
            let _ = writeln!(out, "| option | default | environment | meaning |");
            let _ = writeln!(out, "|---|---|---|---|");
            for a in args {
                let name = match (a.get_long(), a.get_short()) {
                    (Some(l), _) => format!("--{l}"),
                    (None, Some(s)) => format!("-{s}"),
                    (None, None) => a
                        .get_value_names()
                        .and_then(|v| v.first())
                        .map_or_else(|| a.get_id().to_string().to_uppercase(), |v| v.to_string()),
                };
                let takes_value = a.get_action().takes_values();
                let value = match a.get_value_names() {
                    Some(v)
                        if takes_value && (a.get_long().is_some() || a.get_short().is_some()) =>
                    {
                        format!(
                            " {}",
                            v.iter()
                                .map(|n| n.to_string())
                                .collect::<Vec<_>>()
                                .join(" ")
                        )
                    }
                    _ => String::new(),
                };
                let default = a
                    .get_default_values()
                    .iter()
                    .map(|d| d.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(", ");
                let env = a
                    .get_env()
                    .map(|e| format!("`{}`", e.to_string_lossy()))
                    .unwrap_or_default();
                let help = a
                    .get_long_help()
                    .or_else(|| a.get_help())
                    .map(|h| h.to_string())
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "| `{name}{value}` | {} | {env} | {} |",
                    if default.is_empty() {
                        String::new()
                    } else {
                        format!("`{}`", cell(&default))
                    },
                    cell(&help)
                );
            }
            out.push('\n');
        }
    }
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        flags_of(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

fn generated() -> String {
    let mut out = String::new();
    flags_of(&dryrun::cli::command(), "dryrun", &mut out);
    out
}

#[test]
fn the_command_line_reference_is_the_clap_definitions() {
    let doc = doc();
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("{DOC} has no {BEGIN} ... {END} block");
    };
    let have = &doc[b + BEGIN.len()..e];
    let want = format!("\n{}", generated());
    if have == want {
        return;
    }
    if std::env::var_os("DRYRUN_BLESS").is_some() {
        let new = format!("{}{BEGIN}{want}{}", &doc[..b], &doc[e..]);
        std::fs::write(root().join(DOC), new).unwrap();
        return;
    }
    let missing: Vec<&str> = want
        .lines()
        .filter(|l| !have.lines().any(|h| h == *l))
        .take(20)
        .collect();
    panic!(
        "{DOC}'s command-line reference differs from the clap definitions (run `DRYRUN_BLESS=1 cargo test --test docs_reference` and review the diff); lines it lacks:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_environment_variable_the_code_reads_is_documented() {
    let doc = doc();
    let re = regex::Regex::new(r#""(DRYRUN_[A-Z0-9_]+)""#).unwrap();
    let mut missing = std::collections::BTreeSet::new();
    let mut seen = 0;
    for entry in walkdir::WalkDir::new(root().join("src")) {
        let entry = entry.unwrap();
        if entry.path().extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap();
        for c in re.captures_iter(&text) {
            seen += 1;
            let name = &c[1];
            if !doc.contains(&format!("`{name}`")) && !doc.contains(&format!("`{name}=")) {
                missing.insert(name.to_string());
            }
        }
    }
    assert!(seen > 10, "the scan found the code's variables ({seen})");
    assert!(
        missing.is_empty(),
        "{DOC} does not name these variables the code reads: {missing:?}"
    );
}

/// The serde field names of `name` in `file`: renames honoured, skipped
/// fields left out.
fn keys_of(file: &str, name: &str) -> Vec<String> {
    let src = std::fs::read_to_string(root().join(file)).unwrap();
    let re = regex::Regex::new(&format!(r"(?s)struct {name}\b[^{{]*\{{(.*?)\n\}}")).unwrap();
    let body = re
        .captures(&src)
        .unwrap_or_else(|| panic!("no struct {name} in {file}"))[1]
        .to_string();
    let field = regex::Regex::new(r"^(?:pub(?:\([a-z]+\))?\s+)?([a-z_][a-z0-9_]*)\s*:").unwrap();
    let rename = regex::Regex::new(r#"rename\s*=\s*"([^"]+)""#).unwrap();
    let skip = regex::Regex::new(r"serde\(.*\bskip\b[^_]").unwrap();
    let (mut keys, mut renamed, mut skipped) = (Vec::new(), None, false);
    for l in body.lines().map(str::trim) {
        if l.starts_with("//") {
            continue;
        }
        if let Some(r) = rename.captures(l) {
            renamed = Some(r[1].to_string());
        }
        if skip.is_match(l) {
            skipped = true;
        }
        if let Some(f) = field.captures(l) {
            if !skipped {
                keys.push(renamed.take().unwrap_or_else(|| f[1].to_string()));
            }
            renamed = None;
            skipped = false;
        }
    }
    assert!(!keys.is_empty(), "struct {name} in {file} has fields");
    keys
}

/// The text of the section under `heading` (to the next heading of its
/// level or above).
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let start = doc
        .find(&format!("\n## {heading}\n"))
        .or_else(|| doc.find(&format!("\n### {heading}\n")))
        .unwrap_or_else(|| panic!("{DOC} has no section {heading:?}"));
    let rest = &doc[start + 1..];
    let body_start = rest.find('\n').unwrap();
    let end = rest[body_start..]
        .find("\n## ")
        .map_or(rest.len(), |e| body_start + e);
    &rest[..end]
}

#[test]
fn every_policy_image_task_and_envelope_key_is_documented() {
    let doc = doc();
    let groups: &[(&str, &str, &[&str])] = &[
        (
            "Policy files",
            "src/policy/mod.rs",
            &[
                "PolicyFile",
                "WorkspaceBoundConfig",
                "InlineCodeConfig",
                "ThresholdsConfig",
                "BuiltinConfig",
                "RuleConfig",
                "MatchConfig",
            ],
        ),
        (
            "Policy files",
            "src/policy/view.rs",
            &["ViewPolicyConfig", "ViewMaskConfig"],
        ),
        (
            "Policy files",
            "src/policy/egress.rs",
            &["EgressPolicyConfig", "ServiceConfig"],
        ),
        (
            "Policy files",
            "src/policy/stubs.rs",
            &["StubConfig", "StubMatchConfig"],
        ),
        ("Policy files", "src/model/stubs.rs", &["Answer"]),
        ("Sandbox images", "src/sandbox/spec.rs", &["ImageProfile"]),
        (
            "The task file: dryrun.yaml",
            "src/envelope/mod.rs",
            &["TaskFile", "HookIntent"],
        ),
        (
            "The envelope",
            "src/envelope/mod.rs",
            &["Envelope", "Intent", "Limits", "Live"],
        ),
    ];
    let mut missing = Vec::new();
    for (heading, file, structs) in groups {
        let text = section(&doc, heading);
        for s in *structs {
            for k in keys_of(file, s) {
                if !text.contains(&format!("`{k}`"))
                    && !text.contains(&format!("`{k}:"))
                    && !text.contains(&format!(".{k}`"))
                {
                    missing.push(format!("{heading}: {s}.{k}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{DOC} does not name these keys: {missing:#?}"
    );
}
