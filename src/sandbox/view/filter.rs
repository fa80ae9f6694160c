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
];

/// The key of a configuration line: an XML element's name, else the text
/// before the first `=`, else before the first `:` (YAML); `None` for a
/// line without one.
fn key_of(line: &str) -> Option<&str> {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix('<') {
        let end = rest
            .find(|c: char| c == '>' || c.is_whitespace() || c == '/')
            .unwrap_or(rest.len());
        return Some(&rest[..end]);
    }
    if let Some(i) = t.find('=') {
        return Some(&t[..i]);
    }
    t.find(':').map(|i| &t[..i])
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
    key_of(line).is_some_and(|k| {
        let k = k.to_ascii_lowercase();
        SECRET_KEY_WORDS.iter().any(|w| k.contains(w))
    })
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
    for raw in text.split_inclusive(|b| *b == b'\n') {
        let line = String::from_utf8_lossy(raw);
        if is_section_header(&line) {
            dropping_section = is_secret_line(&line);
        }
        if dropping_section || is_secret_line(&line) {
            removed += 1;
            continue;
        }
        out.extend_from_slice(raw);
    }
    (out, removed)
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
}
