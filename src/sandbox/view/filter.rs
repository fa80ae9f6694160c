//! The line filter for configuration files served filtered (the view's
//! `FILTERS` table): the file as it is, without the lines that carry
//! credentials. Pure: bytes in, bytes out.

/// Words that mark a key as a credential (compared lowercase, anywhere in
/// the key).
const SECRET_KEY_WORDS: &[&str] = &[
    "token",
    "password",
    "passwd",
    "secret",
    "_auth",
    "authident",
    "authorization",
    "extraheader",
    "credential",
    "apikey",
    "api_key",
    "api-key",
    "private_key",
    "privatekey",
    "access_key",
    "accesskey",
    "passphrase",
];

/// Keys ending in `key` that name something public (a key's id, a public
/// key), kept; every other key ending in `key` (`gpr.key`,
/// `signingInMemoryKey`, `<key>`) is taken for a secret.
const PUBLIC_KEYS: &[&str] = &["signingkey", "publickey", "pubkey", "hostkey"];

/// The keys of a configuration line: for XML, the name of every element
/// opened on it (`<settings><server><password>` has three); else the text
/// before the first `=`, else before the first `:` (YAML).
fn keys_of(line: &str) -> Vec<&str> {
    let t = line.trim_start();
    if t.starts_with('<') {
        return xml_opened(t).collect();
    }
    if let Some(i) = t.find('=') {
        return vec![&t[..i]];
    }
    t.find(':').map(|i| vec![&t[..i]]).unwrap_or_default()
}

/// The names of the elements opened on an XML line (not closing tags,
/// comments or declarations).
fn xml_opened(t: &str) -> impl Iterator<Item = &str> {
    t.split('<').skip(1).filter_map(|rest| {
        let end = rest
            .find(|c: char| c == '>' || c.is_whitespace() || c == '/')
            .unwrap_or(rest.len());
        let name = &rest[..end];
        (!name.is_empty() && !name.starts_with(['!', '?'])).then_some(name)
    })
}

/// Does this key name a credential?
fn is_secret_key(k: &str) -> bool {
    let k = k.trim().to_ascii_lowercase();
    SECRET_KEY_WORDS.iter().any(|w| k.contains(w))
        || (k.ends_with("key") && !PUBLIC_KEYS.iter().any(|p| k.ends_with(p)))
}

/// A URL with a user name or password in it (`scheme://user[:pw]@host`).
fn has_url_credentials(line: &str) -> bool {
    let mut rest = line;
    while let Some(i) = rest.find("://") {
        let after = &rest[i + 3..];
        let authority_end = after
            .find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == '\'' || c == ']')
            .unwrap_or(after.len());
        if after[..authority_end].contains('@') {
            return true;
        }
        rest = after;
    }
    false
}

/// Does this line carry a credential?
pub(crate) fn is_secret_line(line: &str) -> bool {
    if has_url_credentials(line) {
        return true;
    }
    keys_of(line).into_iter().any(is_secret_key)
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches([' ', '\t']).len()
}

/// How many lines after the credential line `lines[i]` still belong to
/// its value, in the syntaxes these files allow: git's trailing backslash,
/// a TOML multi-line string (`"""`, `'''`), an XML element closed on a
/// later line, and lines indented deeper than the key (an INI
/// continuation, a YAML block scalar or nested mapping), blank lines
/// inside such a block included.
fn continuation(lines: &[String], i: usize) -> usize {
    let first = lines[i].trim_end_matches(['\r', '\n']);
    let mut n = 0;
    let mut at = i;
    // git: a value continues while its line ends with a backslash.
    while lines[at].trim_end_matches(['\r', '\n']).ends_with('\\') && at + 1 < lines.len() {
        at += 1;
        n += 1;
    }
    // TOML: a multi-line string opened and not closed on the key's line.
    for delim in ["\"\"\"", "'''"] {
        if first.matches(delim).count() % 2 == 1 {
            while at + 1 < lines.len() {
                at += 1;
                n += 1;
                if lines[at].contains(delim) {
                    break;
                }
            }
        }
    }
    // XML: a credential element opened and not closed on this line.
    if first.trim_start().starts_with('<') {
        for name in xml_opened(first.trim_start()).filter(|k| is_secret_key(k)) {
            let close = format!("</{name}");
            if !first.contains(&close) {
                while at + 1 < lines.len() {
                    at += 1;
                    n += 1;
                    if lines[at].contains(&close) {
                        break;
                    }
                }
            }
        }
    }
    // INI and YAML: deeper-indented lines (and blank lines between them).
    let base = indent(first);
    let mut j = at + 1;
    while j < lines.len() {
        let l = lines[j].trim_end_matches(['\r', '\n']);
        if l.trim().is_empty() {
            j += 1;
            continue;
        }
        if indent(l) <= base {
            break;
        }
        j += 1;
        n = j - 1 - i;
    }
    n
}

/// An INI/TOML/git section header (`[section]`, `[url "..."]`).
fn is_section_header(line: &str) -> bool {
    let t = line.trim();
    t.starts_with('[') && t.ends_with(']')
}

/// The file without its credential lines, and how many lines were
/// removed. A section header that carries a credential takes its whole
/// section with it (its keys would otherwise fall into the section
/// before). Line endings are kept as they were.
pub(crate) fn filter_credentials(text: &[u8]) -> (Vec<u8>, usize) {
    let mut out = Vec::with_capacity(text.len());
    let mut removed = 0;
    let mut dropping_section = false;
    let raws: Vec<&[u8]> = text.split_inclusive(|b| *b == b'\n').collect();
    let lines: Vec<String> = raws
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect();
    let mut i = 0;
    while i < lines.len() {
        let line = &lines[i];
        if is_section_header(line) {
            dropping_section = is_secret_line(line);
        }
        if dropping_section {
            removed += 1;
            i += 1;
        } else if is_secret_line(line) {
            let more = continuation(&lines, i);
            removed += 1 + more;
            i += 1 + more;
        } else {
            out.extend_from_slice(raws[i]);
            i += 1;
        }
    }
    (out, removed)
}

/// The files a git configuration includes: the `path` values of its
/// `[include]` and `[includeIf ...]` sections, as written.
pub(crate) fn git_include_paths(text: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(text);
    let mut including = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix('[') {
            let name = rest
                .split(|c: char| c == ']' || c.is_whitespace() || c == '"')
                .next()
                .unwrap_or("")
                .to_ascii_lowercase();
            including = name == "include" || name == "includeif";
            continue;
        }
        if including
            && let Some((k, v)) = t.split_once('=')
            && k.trim().eq_ignore_ascii_case("path")
        {
            let v = v.trim().trim_matches('"');
            if !v.is_empty() {
                out.push(v.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filtered(s: &str) -> (String, usize) {
        let (b, n) = filter_credentials(s.as_bytes());
        (String::from_utf8(b).unwrap(), n)
    }

    #[test]
    fn npmrc_keeps_registries_and_drops_tokens() {
        let (out, n) = filtered(
            "registry=https://registry.example/\n//registry.example/:_authToken=abc\n_auth=xyz\n_password=p\nsave-exact=true\n",
        );
        assert_eq!(out, "registry=https://registry.example/\nsave-exact=true\n");
        assert_eq!(n, 3);
    }

    #[test]
    fn gitconfig_keeps_identity_and_drops_credential_sections() {
        let (out, n) = filtered(
            "[user]\n\tname = A B\n\temail = a@b.example\n[http]\n\textraheader = AUTHORIZATION: basic xyz\n[url \"https://tok@forge.example/\"]\n\tinsteadOf = https://forge.example/\n[alias]\n\tst = status\n",
        );
        assert_eq!(
            out,
            "[user]\n\tname = A B\n\temail = a@b.example\n[http]\n[alias]\n\tst = status\n"
        );
        assert_eq!(n, 3);
    }

    #[test]
    fn yaml_toml_xml_and_urls() {
        let (out, _) = filtered("npmRegistryServer: \"https://r.example\"\nnpmAuthToken: abc\n");
        assert_eq!(out, "npmRegistryServer: \"https://r.example\"\n");
        let (out, _) =
            filtered("[registries.x]\nindex = \"sparse+https://r.example/\"\ntoken = \"t\"\n");
        assert_eq!(
            out,
            "[registries.x]\nindex = \"sparse+https://r.example/\"\n"
        );
        let (out, _) = filtered("<server>\n  <id>x</id>\n  <password>p</password>\n</server>\n");
        assert_eq!(out, "<server>\n  <id>x</id>\n</server>\n");
        let (out, _) =
            filtered("[global]\nindex-url = https://u:p@idx.example/simple\ntimeout = 5\n");
        assert_eq!(out, "[global]\ntimeout = 5\n");
        // An address with @ in its path is not a credential.
        assert!(!is_secret_line("url = https://h.example/@scope/pkg"));
        assert!(!is_secret_line("email = a@b.example"));
    }

    #[test]
    fn values_continued_in_their_own_syntax_go_with_their_key() {
        // INI continuation (.pypirc).
        let (out, n) =
            filtered("[pypi]\nusername = __token__\npassword =\n    pypi-TOKEN\nrepository = r\n");
        assert_eq!(out, "[pypi]\nusername = __token__\nrepository = r\n");
        assert_eq!(n, 2);
        // git's trailing backslash.
        let (out, _) = filtered(
            "[http]\n\textraheader = AUTHORIZATION: bearer \\\n\tTOKEN\n\tsslVerify = true\n",
        );
        assert_eq!(out, "[http]\n\tsslVerify = true\n");
        // TOML multi-line strings, both quotes.
        let (out, _) = filtered("[registry]\ntoken = \"\"\"\nTOKEN\n\"\"\"\nindex = \"x\"\n");
        assert_eq!(out, "[registry]\nindex = \"x\"\n");
        let (out, _) = filtered("token = '''\nTOKEN\n'''\nk = 1\n");
        assert_eq!(out, "k = 1\n");
        // XML on one line, and an element closed on a later line.
        let (out, _) = filtered(
            "<settings><servers><server><id>x</id><password>TOKEN</password></server></servers></settings>\n<mirrors/>\n",
        );
        assert_eq!(out, "<mirrors/>\n");
        let (out, _) =
            filtered("<server>\n  <password>\n    TOKEN\n  </password>\n  <id>x</id>\n</server>\n");
        assert_eq!(out, "<server>\n  <id>x</id>\n</server>\n");
        // YAML block scalars, with a blank line inside.
        let (out, _) = filtered("npmAuthToken: >-\n  TOK\n\n  EN\nnpmRegistryServer: r\n");
        assert_eq!(out, "npmRegistryServer: r\n");
        // Keys ending in `key` (Gradle); a public one is kept.
        let (out, _) =
            filtered("gpr.key=TOKEN\nsigningInMemoryKey=-----BEGIN\norg.gradle.jvmargs=-Xmx1g\n");
        assert_eq!(out, "org.gradle.jvmargs=-Xmx1g\n");
        let (out, n) = filtered("[user]\n\tsigningkey = ABCD1234\n");
        assert_eq!((out.as_str(), n), ("[user]\n\tsigningkey = ABCD1234\n", 0));
    }

    #[test]
    fn git_includes_are_found_in_both_section_kinds() {
        let got = git_include_paths(
            b"[user]\n\tname = A\n[include]\n\tpath = ~/.gitconfig.local\n[includeIf \"gitdir:~/work/\"]\n\tpath = \"work.inc\"\n[alias]\n\tpath = no\n",
        );
        assert_eq!(got, vec!["~/.gitconfig.local", "work.inc"]);
    }
}
