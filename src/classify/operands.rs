//! Arguments a command only reads (an archive it extracts or lists): they
//! may lie outside the workspace without widening what it changes.

use super::paths::is_short_cluster;
use super::{Word, is_flag};

/// Tar's mode, from its first argument or options: `x`/`t` read the
/// archive, `c`/`r`/`u`/`A` write it.
fn tar_reads_archive(args: &[Word]) -> bool {
    for w in args {
        let a = w.text();
        if matches!(a, "--extract" | "--get" | "--list" | "--diff" | "--compare") {
            return true;
        }
        if matches!(a, "--create" | "--append" | "--update" | "--concatenate") {
            return false;
        }
        let cluster = a.strip_prefix('-').unwrap_or(a);
        if a.starts_with("--") || cluster.is_empty() {
            continue;
        }
        if cluster.contains(['x', 't', 'd']) && !cluster.contains(['c', 'r', 'u', 'A']) {
            return true;
        }
        if cluster.contains(['c', 'r', 'u', 'A']) {
            return false;
        }
    }
    false
}

/// Arguments the command only reads, which may be outside the workspace
/// without widening what it changes: the archive `tar -x`/`tar -t` or
/// `unzip` reads (where it extracts to is still checked).
pub(super) fn read_only_operands(base: &str, args: &[Word]) -> Vec<usize> {
    let mut out = Vec::new();
    match base {
        "tar" | "gtar" | "bsdtar" if tar_reads_archive(args) => {
            for (i, w) in args.iter().enumerate() {
                let a = w.text();
                if a == "-f"
                    || a == "--file"
                    || (!a.starts_with("--") && a.starts_with('-') && a.ends_with('f'))
                {
                    out.push(i + 1);
                } else if a.starts_with("--file=") {
                    out.push(i);
                } else if i == 0 && !a.starts_with('-') && a.ends_with('f') {
                    // Old-style `tar xzf ARCHIVE`.
                    out.push(1);
                }
            }
        }
        // (`gunzip FILE.gz` replaces its operand with `FILE`: a write of it,
        // read only with `-c`, below.)
        "unzip" | "zcat" | "bzcat" | "xzcat" | "zstdcat" | "7z" | "7za" => {
            // unzip ARCHIVE [-d DIR]: the first positional is read.
            if let Some(i) = args.iter().position(|w| !is_flag(w.text()))
                && !matches!(base, "7z" | "7za")
            {
                out.push(i);
            }
            if matches!(base, "7z" | "7za") {
                // 7z x ARCHIVE
                let pos: Vec<usize> = (0..args.len())
                    .filter(|i| !is_flag(args[*i].text()))
                    .collect();
                if pos.len() >= 2 && matches!(args[pos[0]].text(), "x" | "e" | "l" | "t") {
                    out.push(pos[1]);
                }
            }
        }
        // Copies read their sources and write the last operand (or the
        // `-t DIR`). (A link's target is judged where it points: a link in
        // the workspace to a file outside is a way out.)
        "cp" | "install" | "rsync" | "scp" => {
            if base == "rsync"
                && args
                    .iter()
                    .any(|w| w.text().starts_with("--remove-source-files"))
            {
                return out;
            }
            let with_value = [
                "-t",
                "--target-directory",
                "-S",
                "--suffix",
                "-m",
                "--mode",
                "-o",
                "-g",
                "-e",
                "--exclude",
                "--include",
                "--filter",
                "-f",
                "--rsh",
                "--chmod",
                "--chown",
            ];
            let mut pos = Vec::new();
            let mut target_dir = false;
            let mut i = 0;
            while i < args.len() {
                let a = args[i].text();
                if matches!(a, "-t" | "--target-directory") || a.starts_with("--target-directory=")
                {
                    target_dir = true;
                }
                if with_value.contains(&a) {
                    i += 2;
                    continue;
                }
                if a == "--" {
                    pos.extend(i + 1..args.len());
                    break;
                }
                if !is_flag(a) {
                    pos.push(i);
                }
                i += 1;
            }
            let sources = if target_dir {
                &pos[..]
            } else {
                &pos[..pos.len().saturating_sub(1)]
            };
            out.extend_from_slice(sources);
        }
        // Creating an archive reads its inputs; only the archive (`-f A`,
        // zip's first operand) is written.
        "tar" | "gtar" | "bsdtar" => {
            // `-C DIR` is where the inputs are read from when creating
            // (`tar -czf site.tgz -C /var/www .`); extracting, it is where
            // files are written (above, not skipped there).
            let creates = args.iter().enumerate().any(|(i, w)| {
                let a = w.text();
                a == "--create"
                    || (is_short_cluster(a) || i == 0 && !a.starts_with('-'))
                        && a.trim_start_matches('-').contains('c')
            });
            let mut skip_next = false;
            for (i, w) in args.iter().enumerate() {
                let a = w.text();
                if skip_next {
                    skip_next = false;
                    continue;
                }
                if creates && matches!(a, "-C" | "--directory") {
                    out.push(i + 1);
                    skip_next = true;
                    continue;
                }
                if creates && a.starts_with("--directory=") {
                    out.push(i);
                    continue;
                }
                let archive_flag = a == "-f"
                    || a == "--file"
                    || a == "-C"
                    || a == "--directory"
                    || (is_short_cluster(a) && a.ends_with('f'))
                    || (i == 0 && !a.starts_with('-') && a.ends_with('f'));
                if archive_flag {
                    skip_next = true;
                    continue;
                }
                if !is_flag(a) && (i != 0 || a.starts_with('-')) {
                    out.push(i);
                }
            }
        }
        // A compressor writing to its standard output (`gzip -dc A`,
        // `xz --stdout A`) reads its operands and changes none of them.
        "gzip" | "gunzip" | "bzip2" | "bunzip2" | "xz" | "unxz" | "zstd" | "unzstd" | "lz4"
        | "lzma" | "pigz" | "pbzip2"
            if args.iter().any(|w| {
                let a = w.text();
                matches!(a, "--stdout" | "--to-stdout")
                    || (is_short_cluster(a) && a[1..].contains('c'))
            }) =>
        {
            out.extend((0..args.len()).filter(|i| !is_flag(args[*i].text())));
        }
        // `split INPUT [PREFIX]` reads its input; the pieces are written
        // under the prefix.
        "split" => {
            let mut i = 0;
            while i < args.len() {
                let a = args[i].text();
                if matches!(a, "-a" | "-b" | "-C" | "-l" | "-n" | "-t") {
                    i += 2;
                    continue;
                }
                if a == "--" {
                    i += 1;
                    break;
                }
                if !is_flag(a) {
                    break;
                }
                i += 1;
            }
            if i < args.len() {
                out.push(i);
            }
        }
        // find reads the trees it starts from; what it writes is a file
        // named by `-fprint`/`-fprintf`/`-fls` (an operand after the start
        // paths, still judged), what it runs is judged as that command, and
        // with `-delete` its start paths are what it deletes.
        "find" if !args.iter().any(|w| w.text() == "-delete") => {
            out.extend(
                args.iter()
                    .take_while(|w| !w.text().starts_with(['-', '(', '!']))
                    .enumerate()
                    .map(|(i, _)| i),
            );
        }
        "zip" => {
            let pos: Vec<usize> = (0..args.len())
                .filter(|i| !is_flag(args[*i].text()))
                .collect();
            out.extend(pos.iter().skip(1));
        }
        _ => {}
    }
    out
}

/// Readers that write a file they are told to: an output option
/// (`shuf -o F`, `iconv -o F`, `xmllint --output F`, `less -o F` and
/// `rlwrap -l F`, the log of what they show, `tree -o F`), or a second operand (`uniq IN OUT`, `xxd IN OUT`,
/// `xxd -r - OUT`).
const READER_OUTPUT_OPTIONS: &[(&str, &[&str])] = &[
    ("shuf", &["-o", "--output"]),
    ("iconv", &["-o", "--output"]),
    ("sdiff", &["-o", "--output"]),
    ("base64", &["-o", "--output"]),
    ("base32", &["-o", "--output"]),
    ("basenc", &["-o", "--output"]),
    ("uudecode", &["-o", "--output-file"]),
    ("xmllint", &["-o", "--output"]),
    ("rlwrap", &["-l", "--logfile"]),
    ("less", &["-o", "-O", "--log-file", "--LOG-FILE"]),
    ("zless", &["-o", "-O", "--log-file", "--LOG-FILE"]),
    ("bzless", &["-o", "-O", "--log-file", "--LOG-FILE"]),
    ("xzless", &["-o", "-O", "--log-file", "--LOG-FILE"]),
    ("zstdless", &["-o", "-O", "--log-file", "--LOG-FILE"]),
    ("tree", &["-o"]),
];
const READER_OUTPUT_OPERAND: &[&str] = &["uniq", "xxd"];

/// Options that name the file a program writes, whatever the program:
/// long, and spelled for nothing else (but ack's `--output`, which is an
/// expression it prints); `--target-directory=DIR` names the directory
/// `cp`, `mv`, `ln` and `install` write into (its value is not an operand
/// the blast radius sees: `xargs cp --target-directory=/home/backup`).
const LONG_OUTPUT_OPTIONS: &[&str] = &[
    "--target-directory",
    "--output",
    "--output-file",
    "--output-document",
    "--outfile",
    "--out-file",
    "--log-file",
    "--logfile",
];

/// The files a reader writes (see `READER_OUTPUT_OPTIONS`), and what any
/// program's long output option names.
fn reader_output_targets(base: &str, args: &[Word]) -> Vec<Word> {
    let options = READER_OUTPUT_OPTIONS
        .iter()
        .find(|(b, _)| *b == base)
        .map(|(_, o)| *o)
        .unwrap_or(&[]);
    let long: &[&str] = if base == "ack" {
        &[]
    } else {
        LONG_OUTPUT_OPTIONS
    };
    let mut out = if matches!(base, "awk" | "gawk" | "mawk" | "nawk") {
        awk_output_targets(args)
    } else {
        Vec::new()
    };
    let mut operands = 0;
    let mut i = 0;
    while i < args.len() {
        let w = &args[i];
        let a = w.text();
        i += 1;
        if a == "--" {
            continue;
        }
        if let Some((flag, value)) = a.split_once('=')
            && (options.contains(&flag) || long.contains(&flag))
        {
            out.push(Word {
                literal: Some(value.to_string()),
                ..w.clone()
            });
        } else if options.contains(&a) || long.contains(&a) {
            out.extend(args.get(i).cloned());
            i += 1;
        } else if matches!(
            (base, a),
            ("uniq", "-f" | "-s" | "-w")
                | (
                    "xxd",
                    "-c" | "-g" | "-l" | "-o" | "-s" | "-n" | "-cols" | "-len" | "-seek"
                )
        ) {
            // An option's value, not an operand.
            i += 1;
        } else if !is_flag(a) || a == "-" {
            operands += 1;
            if operands == 2 && READER_OUTPUT_OPERAND.contains(&base) {
                out.push(w.clone());
            }
        }
    }
    out
}

/// The files an awk program prints into: `print … > "F"`, `printf … >> F`
/// where `F` is a variable given with `-v F=PATH` (or as an operand
/// `F=PATH`), as GTFOBins' file-write form does (`awk -v LFILE=/etc/x
/// 'BEGIN { print "DATA" > LFILE }'`). awk writes them; a target computed
/// from the data (`> $2`) or from a variable the command does not set is
/// not named here.
fn awk_output_targets(args: &[Word]) -> Vec<Word> {
    let mut vars: Vec<(&str, &str)> = Vec::new();
    let mut programs: Vec<&str> = Vec::new();
    let mut program_file = false;
    let mut positional = false;
    fn assignment(a: &str) -> Option<(&str, &str)> {
        a.split_once('=').filter(|(n, _)| {
            !n.is_empty()
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !n.starts_with(|c: char| c.is_ascii_digit())
        })
    }
    let mut i = 0;
    while i < args.len() {
        let a = args[i].text();
        i += 1;
        let value = args.get(i).map(|w| w.text());
        match a {
            "-v" | "--assign" => {
                vars.extend(value.and_then(assignment));
                i += 1;
            }
            "-e" | "--source" => {
                programs.extend(value);
                i += 1;
            }
            "-f" | "--file" | "-E" | "--exec" => {
                program_file = true;
                i += 1;
            }
            "-F" | "--field-separator" | "-i" | "--include" | "-l" | "--load" => i += 1,
            _ if a.starts_with("-v") && a.len() > 2 => vars.extend(assignment(&a[2..])),
            _ if a.starts_with('-') && a != "-" => {}
            _ if !positional && !program_file && programs.is_empty() => {
                positional = true;
                programs.push(a);
            }
            _ => vars.extend(assignment(a)),
        }
    }
    if !programs.iter().any(|p| p.contains('>')) {
        return Vec::new();
    }
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(r#"\bprintf?\b[^;}\n>]*>>?\s*(?:"([^"]+)"|([A-Za-z_][A-Za-z_0-9]*))"#)
            .expect("the awk output pattern compiles")
    });
    let mut out = Vec::new();
    for p in programs {
        for c in re.captures_iter(p) {
            let target = match (c.get(1), c.get(2)) {
                (Some(path), _) => Some(path.as_str()),
                (None, Some(var)) => vars
                    .iter()
                    .rev()
                    .find(|(n, _)| *n == var.as_str())
                    .map(|(_, v)| *v),
                _ => None,
            };
            if let Some(t) = target.filter(|t| !t.contains('$')) {
                out.push(Word::quoted_literal(t));
            }
        }
    }
    out
}

impl super::Ctx<'_> {
    /// A file a reader is told to write, outside the workspace, is a
    /// write outside (`shuf -o /etc/x`, `uniq a /etc/x`): the rule that
    /// calls the program a reader is about what it reads.
    pub(super) fn reader_outputs(&mut self, base: &str, args: &[Word], shown: &str) {
        for w in reader_output_targets(base, args) {
            let w = self.rebase_on_cwd(&w).into_owned();
            let t = w.text();
            if t != "-" && !t.starts_with("/dev/") && self.outside_workspace(&w) {
                self.add(
                    "blast.outside",
                    format!("operates on {t}, outside the workspace"),
                    shown,
                );
            }
        }
    }
}

/// Verbs that delete or reset what they are given: with files of the
/// workspace as every operand, what they delete is in the workspace.
const LOCAL_DELETE_VERBS: &[&str] = &[
    "delete", "remove", "rm", "del", "erase", "wipe", "purge", "reset", "strip", "truncate",
];

/// Options that name where a tool acts rather than how.
const PLACE_OPTIONS: &[&str] = &[
    "host",
    "server",
    "remote",
    "url",
    "uri",
    "endpoint",
    "bucket",
    "cluster",
    "region",
    "project",
    "org",
    "organization",
    "context",
    "namespace",
    "profile",
    "account",
    "zone",
    "registry",
    "repo",
    "repository",
    "database",
    "db",
    "node",
    "site",
    "env",
    "environment",
    "instance",
    "app",
];

/// Options that name a file the tool reads its work from.
const FILE_OPTIONS: &[&str] = &[
    "f", "file", "filename", "files", "config", "manifest", "spec", "values", "input", "from",
    "list",
];

/// A relative path that names a file or directory in the workspace, not
/// something remote spelled like one: `./x`, or a path with a `/` whose
/// first part is not a host (`example.com/pkg`) and which is either deeper
/// than `owner/repo`, ends in a file name with an extension or is spelled
/// as a directory (`src/main.rs`, `path/to/submodule`, `photos/2024/`); never `..`, a home, a variable, a
/// glob, a remote (`host:path`, `user@host`, `s3://`).
pub(super) fn workspace_file(w: &str) -> bool {
    if w.is_empty()
        || w.starts_with(['-', '/', '~', '.']) && !w.starts_with("./")
        || w.contains([
            ':', '@', '$', '`', '*', '?', '[', '{', '\\', '=', ' ', '\t', '\n',
        ])
    {
        return false;
    }
    let parts: Vec<&str> = w.split('/').filter(|p| !p.is_empty()).collect();
    if parts.contains(&"..") || parts.is_empty() {
        return false;
    }
    if let Some(rest) = w.strip_prefix("./") {
        return !rest.starts_with('/');
    }
    let last = parts[parts.len() - 1];
    let extension = last
        .rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && !ext.is_empty());
    w.contains('/')
        && !parts[0].contains('.')
        && (parts.len() >= 3 || extension || w.ends_with('/'))
}

/// A program no rule knows, told by a flag (`--delete`) or a subcommand
/// word (not by its own name) to delete, remove or reset, whose every
/// operand is a file of the workspace (`fdupes --recurse --delete
/// path/to/directory`, `stow --delete --target path/to/dir path/to/pkg`,
/// `exiv2 rm path/to/image.jpg`): what it deletes is in those files, a
/// change the rehearsal shows, as `rm path/to/file` is. A flag changes
/// what the program does to the files it is given, so any path of the
/// workspace counts; a subcommand acts on the tool's own collection (its
/// database, its packages, its remote), whose members may be named by
/// paths (`zoxide remove path/to/directory` forgets a directory kept in the
/// home), so only a file name with an extension or `./` counts. Not with
/// an operand that is not such a file (a name, a host, an id: `tool delete
/// name`, `tool rm bucket`), a file given only as an option's value (`ko
/// delete --filename manifest.yaml` deletes what the manifest describes),
/// a value that names a remote (`--host=db.example.com`, `--remote
/// origin`), or a verb that sends (`upload`, `--push`).
pub(super) fn deletes_only_workspace_files(base: &str, verb: &str, texts: &[&str]) -> bool {
    use super::words::{UNKNOWN_CHANGE_VERBS, verb_parts};
    let word = verb.trim_start_matches('-');
    let sends = |w: &str| {
        verb_parts(w).any(|p| UNKNOWN_CHANGE_VERBS.contains(&p) && !LOCAL_DELETE_VERBS.contains(&p))
    };
    if verb == base || !verb_parts(word).any(|p| LOCAL_DELETE_VERBS.contains(&p)) || sends(word) {
        return false;
    }
    let by_flag = verb.starts_with('-');
    let named_file = |w: &str| {
        workspace_file(w)
            && (by_flag
                || w.starts_with("./")
                || w.rsplit('/')
                    .next()
                    .and_then(|l| l.rsplit_once('.'))
                    .is_some_and(|(stem, ext)| {
                        !stem.is_empty() && ext.chars().all(|c| c.is_ascii_alphanumeric())
                    }))
    };
    let mut files = 0;
    let mut operands_only = false;
    let mut value_of: Option<&str> = None;
    for a in texts {
        if let Some(name) = value_of.take()
            && !operands_only
            && !a.starts_with('-')
        {
            // The value of the long option before it (`--target DIR`,
            // `--filename F`): a file of the workspace, or a plain word
            // for an option that does not name a place.
            // A file given to an option named for one is where the tool
            // reads what to delete (`--filename manifest.yaml`, `-f F`), not
            // a target; after a flag that takes no value it is an operand.
            let plain = a
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
            if workspace_file(a) {
                if named_file(a) && !verb_parts(name).any(|p| FILE_OPTIONS.contains(&p)) {
                    files += 1;
                }
            } else if !plain || verb_parts(name).any(|p| PLACE_OPTIONS.contains(&p)) {
                return false;
            }
            continue;
        }
        if *a == verb && !operands_only {
            continue;
        }
        if *a == "--" && !operands_only {
            operands_only = true;
            continue;
        }
        if a.starts_with('-') && !operands_only {
            let name = a.trim_start_matches('-').split('=').next().unwrap_or("");
            if sends(name) {
                return false;
            }
            match a.split_once('=') {
                Some((_, v)) => {
                    let plain = v
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
                    if !workspace_file(v)
                        && (!plain || verb_parts(name).any(|p| PLACE_OPTIONS.contains(&p)))
                    {
                        return false;
                    }
                }
                None if a.starts_with("--") && *a != verb || matches!(*a, "-f" | "-F" | "-c") => {
                    value_of = Some(if a.starts_with("--") { name } else { "file" })
                }
                None => {}
            }
            continue;
        }
        if !named_file(a) {
            return false;
        }
        files += 1;
    }
    files > 0
}
