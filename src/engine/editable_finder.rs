//! setuptools' editable finder, recognised.
//!
//! `pip install -e .` of a project setuptools builds (PEP 660, any project
//! without a `src/` layout) leaves two files in `site-packages`: a `.pth`
//! whose one line is `import __editable___NAME_finder;
//! __editable___NAME_finder.install()`, and the module it imports. Python
//! runs that line at every start of the environment, so by the `.pth` rule
//! alone every editable install would need a person. The module is
//! setuptools' own template with three data lines filled in: it adds a
//! finder that maps the listed package names to the listed directories,
//! which is what a `.pth` of plain paths does (and that is not a finding).
//!
//! So the pair is expected, not a startup hook, when both hold:
//! - the `.pth` is exactly that one import line, naming a module
//!   `__editable___…_finder` that the same run wrote beside it;
//! - that module is one of setuptools' published templates, byte for byte,
//!   once its three data lines are set aside, and those lines hold only
//!   literals: strings, lists of strings and dictionaries of them (no
//!   name, call or operator but the template's own `+ ".__path_hook__"`).
//!
//! The templates are known by their BLAKE3 hashes, one per distinct
//! template of every setuptools release from 64.0.0 (the first with the
//! finder) on: `tests/fixtures/setuptools-finders/collect.py` downloads
//! each release and prints the table below. A release with a new template
//! is not recognised: its editable installs need a person until the table
//! is extended (fail closed).

/// BLAKE3 of each normalised template (see [`normalise`]), from the
/// 121 releases 64.0.0 to 84.2.1.
const TEMPLATES: &[&str] = &[
    // setuptools 64.0.0 to 65.1.0 (8 releases)
    "01f41cfe1860143d43a02f529d03dcdc18379548167a6ff60c963260a4c01c2a",
    // setuptools 65.1.1 to 65.2.0 (2 releases)
    "e7e6afdf67e90f6c67b74a57cb6cffae6eba4569b07884ebe0a9ae9ff63eb560",
    // setuptools 65.3.0 to 68.0.0 (29 releases)
    "f24e70d398745ac4c920728318dd874363fc17c7eff6b8d074216874a4c42570",
    // setuptools 68.1.0 (1 release)
    "284e946f17b5a9b7097b929e8ce1022328dc4fef8dbc8fbe39a2c719fcbac9ed",
    // setuptools 68.1.2 (1 release)
    "848bc73417390894737449890086703b35bf81b606427a7d5a0858e99bf01066",
    // setuptools 68.2.0 to 69.5.1 (15 releases)
    "8344962f6a665a3a012002200fef06239402d0d933e0ee055c96ab352199a856",
    // setuptools 70.0.0 to 70.3.0 (5 releases)
    "9539c58fe5250f185ecd268798f1474a25d7ac86c9fa23f168edef6a6e770754",
    // setuptools 71.0.0 to 84.2.1 (60 releases)
    "58bd7b1afa5d3979c9bd3b49b9246f2ec5247eccd7f633cb1ea362cc94ee014c",
];

/// The data lines of the template, by the prefix before ` = ` (the
/// annotated spelling is setuptools 70.1 on).
const DATA_LINES: [(&str, Value); 5] = [
    ("MAPPING", Value::Dict),
    ("MAPPING: dict[str, str]", Value::Dict),
    ("NAMESPACES", Value::Dict),
    ("NAMESPACES: dict[str, list[str]]", Value::Dict),
    ("PATH_PLACEHOLDER", Value::Placeholder),
];

#[derive(Clone, Copy)]
enum Value {
    Dict,
    Placeholder,
}

/// The module a `.pth` line of setuptools' shape imports: `Some(name)`
/// when `text` is exactly `import NAME; NAME.install()` (one line, an
/// optional line end) with NAME of the finder's shape.
pub(super) fn finder_imported_by(text: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(text).ok()?;
    let line = text.strip_suffix('\n').unwrap_or(text);
    let line = line.strip_suffix('\r').unwrap_or(line);
    let rest = line.strip_prefix("import ")?;
    let (name, call) = rest.split_once("; ")?;
    let ok = name.starts_with("__editable___")
        && name.ends_with("_finder")
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && call.strip_prefix(name) == Some(".install()");
    ok.then_some(name)
}

/// Is `module` one of setuptools' finder templates with literal data?
pub(super) fn is_setuptools_finder(module: &[u8]) -> bool {
    normalise(module).is_some_and(|n| {
        let h = blake3::hash(n.as_bytes()).to_hex();
        TEMPLATES.contains(&h.as_str())
    })
}

/// The module with each data line's value replaced by `<DATA>`; `None`
/// when it is not UTF-8, a data line's value is not a literal of its kind,
/// or the MAPPING, NAMESPACES and PATH_PLACEHOLDER lines are not there
/// exactly once each.
pub(super) fn normalise(module: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(module).ok()?;
    let mut out = String::with_capacity(text.len());
    let mut seen = [0u8; 3];
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let data = DATA_LINES.iter().find_map(|(prefix, kind)| {
            let value = body.strip_prefix(prefix)?.strip_prefix(" = ")?;
            Some((prefix, kind, value))
        });
        match data {
            Some((prefix, kind, value)) => {
                let ok = match kind {
                    Value::Dict => dict(value.as_bytes()),
                    Value::Placeholder => placeholder(value.as_bytes()),
                };
                if !ok {
                    return None;
                }
                let slot = match prefix.split(':').next() {
                    Some("MAPPING") => 0,
                    Some("NAMESPACES") => 1,
                    _ => 2,
                };
                seen[slot] += 1;
                out.push_str(prefix);
                out.push_str(" = <DATA>\n");
            }
            None => out.push_str(line),
        }
    }
    (seen == [1, 1, 1]).then_some(out)
}

/// `'…' + ".__path_hook__"`: the finder's name as a string literal.
fn placeholder(v: &[u8]) -> bool {
    let mut p = Lit { s: v, i: 0 };
    p.string() && p.eat(b" + \".__path_hook__\"") && p.i == v.len()
}

/// A dictionary literal whose keys are strings and whose values are
/// strings or lists of strings, as Python's `repr` writes it.
fn dict(v: &[u8]) -> bool {
    let mut p = Lit { s: v, i: 0 };
    p.dict() && p.i == v.len()
}

struct Lit<'a> {
    s: &'a [u8],
    i: usize,
}

impl Lit<'_> {
    fn eat(&mut self, t: &[u8]) -> bool {
        let ok = self.s[self.i..].starts_with(t);
        if ok {
            self.i += t.len();
        }
        ok
    }

    /// A string literal without prefix: `'…'` or `"…"` on one line, a
    /// backslash escaping the next character. Such a literal is only ever
    /// a value; nothing in it runs.
    fn string(&mut self) -> bool {
        let Some(&q) = self.s.get(self.i).filter(|&&c| c == b'\'' || c == b'"') else {
            return false;
        };
        let mut j = self.i + 1;
        while let Some(&c) = self.s.get(j) {
            match c {
                b'\\' => j += 2,
                b'\n' | b'\r' => return false,
                c if c == q => {
                    self.i = j + 1;
                    return true;
                }
                _ => j += 1,
            }
        }
        false
    }

    /// `[]` or `['a', 'b']`.
    fn list(&mut self) -> bool {
        if !self.eat(b"[") {
            return false;
        }
        if self.eat(b"]") {
            return true;
        }
        loop {
            if !self.string() {
                return false;
            }
            if self.eat(b"]") {
                return true;
            }
            if !self.eat(b", ") {
                return false;
            }
        }
    }

    /// `{}` or `{'k': 'v', 'n': ['a']}`.
    fn dict(&mut self) -> bool {
        if !self.eat(b"{") {
            return false;
        }
        if self.eat(b"}") {
            return true;
        }
        loop {
            if !(self.string() && self.eat(b": ")) {
                return false;
            }
            let value = if self.s.get(self.i) == Some(&b'[') {
                self.list()
            } else {
                self.string()
            };
            if !value {
                return false;
            }
            if self.eat(b"}") {
                return true;
            }
            if !self.eat(b", ") {
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pth_line_of_setuptools_shape_names_its_module() {
        let n = "__editable___mypkg_0_1_0_finder";
        let line = format!("import {n}; {n}.install()");
        assert_eq!(finder_imported_by(line.as_bytes()), Some(n));
        assert_eq!(finder_imported_by(format!("{line}\n").as_bytes()), Some(n));
        for bad in [
            format!("import {n}; {n}.install(); import os"),
            format!("import {n}; other.install()"),
            format!("import {n};{n}.install()"),
            "import os; os.install()".to_string(),
            format!("import {n}; {n}.install()\nimport os"),
            format!("import {n}.x; {n}.x.install()"),
        ] {
            assert_eq!(finder_imported_by(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn data_lines_hold_literals_only() {
        assert!(dict(b"{}"));
        assert!(dict(b"{'mypkg': '/w/mypkg'}"));
        assert!(dict(b"{'a': '/x', \"it's\": 'y\\'z'}"));
        assert!(dict(b"{'ns': [], 'n2': ['/a', '/b']}"));
        assert!(placeholder(
            b"'__editable__.mypkg-0.1.0.finder' + \".__path_hook__\""
        ));
        for bad in [
            &b"{'a': __import__('os').system('id')}"[..],
            b"{'a': '/x'} or __import__('os')",
            b"{'a': '/x'}; import os",
            b"{'a': f'{x}'}",
            b"{'a': b'x'}",
            b"{**x}",
            b"dict(a='x')",
            b"{'a': '/x',}",
            b"{'a': 'unterminated}",
        ] {
            assert!(!dict(bad), "{}", String::from_utf8_lossy(bad));
        }
        assert!(!placeholder(b"__name__ + \".__path_hook__\""));
        assert!(!placeholder(b"'x' + \".__path_hook__\"; import os"));
    }

    #[test]
    fn each_data_line_is_there_once() {
        let module = "import sys\nMAPPING = {'a': '/a'}\nNAMESPACES = {}\nPATH_PLACEHOLDER = 'n' + \".__path_hook__\"\n";
        let n = normalise(module.as_bytes()).unwrap();
        assert!(n.contains("MAPPING = <DATA>\n"), "{n}");
        let twice = format!("{module}MAPPING = {{}}\n");
        assert!(normalise(twice.as_bytes()).is_none());
        let missing = module.replace("NAMESPACES = {}\n", "");
        assert!(normalise(missing.as_bytes()).is_none());
        let code = module.replace("NAMESPACES = {}", "NAMESPACES = __import__('os')");
        assert!(normalise(code.as_bytes()).is_none());
    }
}
