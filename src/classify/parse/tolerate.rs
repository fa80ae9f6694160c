//! Inputs bash parses that brush-parser rejects, read the way bash reads
//! them (`bash -n` is the oracle). Each is a rewrite of the source text
//! that changes nothing bash would run; anything else stays a parse error,
//! which asks (principle `fail_closed`).

/// `src` rewritten to what bash reads it as, for brush's error `err`, or
/// `None` when the error is not one bash tolerates.
pub(super) fn bash_reading(src: &str, err: &str) -> Option<String> {
    // `bash -c 'ls \'`: a backslash at the very end of the input has
    // nothing to escape and is a literal backslash.
    if err.contains("unterminated escape") && src.ends_with('\\') {
        return Some(format!("{src}\\"));
    }
    // `ssh host <<'EOF'` with no closing line: bash warns ("here-document
    // delimited by end-of-file") and takes the rest of the input as the
    // body. Closing every heredoc whose delimiter line never comes reads it
    // the same way.
    if err.contains("here document") && !src.contains("$(") && !src.contains('`') {
        let missing: Vec<String> = heredoc_tags(src)
            .into_iter()
            .filter(|t| !src.lines().any(|l| l.trim_start_matches('\t') == t))
            .collect();
        if !missing.is_empty() {
            let mut s = src.to_string();
            for t in missing {
                s.push('\n');
                s.push_str(&t);
            }
            return Some(s);
        }
    }
    None
}

/// The delimiters of the heredocs in `src` (`<<EOF`, `<<-'EOF'`,
/// `<<\EOF`, `<< "EOF"`), quotes and backslashes removed, in order. A
/// here-string (`<<<`) is not one.
fn heredoc_tags(src: &str) -> Vec<String> {
    let b = src.as_bytes();
    let mut tags = Vec::new();
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] == b'<' && b[i + 1] == b'<' {
            if b.get(i + 2) == Some(&b'<') {
                i += 3;
                continue;
            }
            let mut j = i + 2;
            if b.get(j) == Some(&b'-') {
                j += 1;
            }
            while matches!(b.get(j), Some(b' ' | b'\t')) {
                j += 1;
            }
            let mut tag = String::new();
            while let Some(&c) = b.get(j) {
                if c.is_ascii_whitespace() || b";|&<>()".contains(&c) {
                    break;
                }
                if !matches!(c, b'\'' | b'"' | b'\\') {
                    tag.push(c as char);
                }
                j += 1;
            }
            if !tag.is_empty() {
                tags.push(tag);
            }
            i = j;
        } else {
            i += 1;
        }
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_bash_reads() {
        assert_eq!(
            bash_reading("ls \\", "unterminated escape sequence").as_deref(),
            Some("ls \\\\")
        );
        assert_eq!(
            bash_reading("ssh -T h <<'EOI'", "unterminated here document sequence").as_deref(),
            Some("ssh -T h <<'EOI'\nEOI")
        );
        assert_eq!(
            bash_reading("cat <<-\\E\nx", "unterminated here document").as_deref(),
            Some("cat <<-\\E\nx\nE")
        );
        assert_eq!(bash_reading("echo 'x", "unterminated single quote"), None);
        assert_eq!(bash_reading("cat <<< x", "here document"), None);
    }
}
