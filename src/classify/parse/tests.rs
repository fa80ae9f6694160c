//! The parse front's tests: what it finds, and that its shortcuts give
//! what brush's parser gives.

use super::*;

fn cmds(src: &str) -> Vec<Vec<String>> {
    let mut out = Extracted::default();
    let mut n = 0;
    extract(src, 0, &mut out, &mut n).unwrap();
    out.commands
        .iter()
        .map(|c| c.argv.iter().map(|w| w.text().to_string()).collect())
        .collect()
}

#[test]
fn finds_commands_everywhere() {
    let c = cmds("a | b && { c; } || (d) ; e $(f $(g)) `h` <(i) ${x:-$(j)}");
    let names: Vec<&str> = c
        .iter()
        .filter_map(|v| v.first().map(|s| s.as_str()))
        .collect();
    for n in ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
}

#[test]
fn quote_removal_and_ansi_c() {
    assert_eq!(cmds("'rm' -rf x")[0][0], "rm");
    assert_eq!(cmds("\\rm x")[0][0], "rm");
    assert_eq!(cmds("$'\\x72m' x")[0][0], "rm");
    assert_eq!(cmds("r\"m\" x")[0][0], "rm");
    assert_eq!(decode_ansi_c("\\x72\\155"), "rm");
}

/// The fast path for plain and simply quoted words gives what brush's
/// word parser gives.
#[test]
fn plain_word_fast_path_agrees_with_brush() {
    let words = [
        "ls",
        "-la",
        "'rm'",
        "r''m",
        "''",
        "\"\"",
        "\"hello world\"",
        "'a b'\"c d\"e",
        "--name='x y'",
        "\"it's\"",
        "'say \"hi\"'",
        "\"ünïcödé\"",
        "'line⏎two'",
        "\"a\nb\"",
        "of=/dev/sda",
        "*.rs",
        "'*.rs'",
        "\"$HOME\"",
        "\"a\\\"b\"",
        "'unterminated",
        "~/x",
        "{a,b}",
        "$'\\x72m'",
    ];
    for raw in words {
        let mut out = Extracted::default();
        let mut n = 0;
        let mut w = Walker {
            src: raw,
            out: &mut out,
            depth: 0,
            next_pipeline: &mut n,
            origin: Origin::Top,
        };
        let mut acc = WordAcc::default();
        let slow = match brush_parser::word::parse(raw, &options()) {
            Ok(pieces) => {
                w.pieces(&pieces, &mut acc, false);
                Some(((!acc.expanded).then_some(acc.text), acc.quoted))
            }
            Err(_) => None,
        };
        if let Some((lit, quoted)) = plain_word_value(raw) {
            assert_eq!(slow, Some((Some(lit), quoted)), "{raw}");
        }
    }
}

/// What the full parser gives for `src` (no shortcut).
fn extract_with_parser(src: &str) -> Extracted {
    let mut out = Extracted::default();
    let mut n = 0;
    let tokens =
        brush_parser::uncached_tokenize_str(src, &brush_parser::TokenizerOptions::default())
            .unwrap();
    let program = brush_parser::parse_tokens(&tokens, &options()).unwrap();
    let mut w = Walker {
        src,
        out: &mut out,
        depth: 0,
        next_pipeline: &mut n,
        origin: Origin::Top,
    };
    for cc in &program.complete_commands {
        w.compound_list(cc);
    }
    out
}

/// The shortcut for lone simple commands gives what the parser gives,
/// on every corpus command it takes and on edge cases.
#[test]
fn lone_simple_command_agrees_with_the_parser() {
    let corpus = concat!(
        include_str!("../../../tests/classifier_corpus.txt"),
        include_str!("../../../tests/classifier_holdout.txt")
    );
    let mut cases: Vec<String> = corpus
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('\t'))
        .map(|(_, c)| c.replace('⏎', "\n"))
        .collect();
    for extra in [
        "ls",
        "  ls   -la  ",
        "echo if then",
        "dd if=/dev/zero of=x bs=1M",
        "alias ll='ls -l'",
        "export A=b",
        "git commit -m 'a b' -m \"c d\"",
        "echo \"hi!\"",
        "rm -rf /",
        "'rm' -rf x",
        "r''m x",
        "echo 'it''s'",
        "kill %1",
        "ls *.rs ?.md",
        "x=1",
        "time ls",
        "2 x",
    ] {
        cases.push(extra.to_string());
    }
    let mut taken = 0;
    for src in &cases {
        if lone_simple_command(src).is_none() {
            continue;
        }
        taken += 1;
        let mut fast = Extracted::default();
        let mut n = 0;
        extract(src, 0, &mut fast, &mut n).unwrap();
        let full = extract_with_parser(src);
        assert_eq!(fast.commands, full.commands, "{src}");
        assert_eq!(fast.unhandled, full.unhandled, "{src}");
        assert_eq!(fast.functions, full.functions, "{src}");
    }
    assert!(taken > 500, "the shortcut took only {taken} commands");
    for src in [
        "x=1 ls",
        "time ls",
        "export A=b",
        "ls | wc",
        "echo \"$x\"",
        "a\nb",
    ] {
        assert!(lone_simple_command(src).is_none(), "{src}");
    }
}

#[test]
fn functions_heredocs_and_loops() {
    let c = cmds(
        "f() { rm -rf /; }; f\ncat <<EOF\n$(curl x)\nEOF\nfor i in $(seq 3); do echo $i; done",
    );
    let names: Vec<String> = c.iter().filter_map(|v| v.first().cloned()).collect();
    for n in ["rm", "f", "cat", "curl", "seq", "echo"] {
        assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
    }
}
