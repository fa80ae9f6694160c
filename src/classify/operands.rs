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
            let mut skip_next = false;
            for (i, w) in args.iter().enumerate() {
                let a = w.text();
                if skip_next {
                    skip_next = false;
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
