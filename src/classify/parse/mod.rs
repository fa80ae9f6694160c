//! Our small front to brush-parser (pinned): turn a bash string into the
//! simple commands it will run, with words, assignments and redirects, from
//! every place bash runs commands: pipelines, lists, subshells, groups,
//! functions, compound commands, `$(...)`, backticks, `<( )`/`>( )`,
//! parameter defaults, heredocs. `sh -c` strings and wrappers are handled one
//! level up (`unwrap`), which calls back into [`extract`].

use brush_parser::ast;
use brush_parser::word::{ParameterExpr, WordPiece, WordPieceWithSource};

mod lexical;
mod tolerate;
pub use lexical::decode_ansi_c;
use lexical::{lone_simple_command, plain_word_value};

/// Nesting deeper than this (substitutions in substitutions, `sh -c` in
/// `sh -c`) is not followed; the classifier reports it as unhandled.
pub const MAX_DEPTH: u32 = 12;
/// Longest input the parser is given.
pub const MAX_INPUT: usize = 256 * 1024;

/// A word as bash will see it before expansion.
#[derive(Debug, Clone, PartialEq)]
pub struct Word {
    pub raw: String,
    /// The value after quote removal, when the word has no expansion at all.
    pub literal: Option<String>,
    /// Some part was quoted, escaped or ANSI-C quoted (`'rm'`, `\rm`, `$'\x72m'`).
    pub quoted: bool,
    pub ansi_c: bool,
    /// Names of parameters it expands (`$AWS_SECRET`, `${TOKEN:-x}`).
    pub params: Vec<String>,
    /// Starts with `~` (tilde expansion).
    pub tilde: bool,
}

impl Word {
    /// A quoted word whose value is `s` as written (a name quoted in
    /// inline code, taken as a word of its own).
    pub fn quoted_literal(s: &str) -> Word {
        Word {
            raw: s.to_string(),
            literal: Some(s.to_string()),
            quoted: true,
            ansi_c: false,
            params: Vec::new(),
            tilde: false,
        }
    }

    pub fn text(&self) -> &str {
        self.literal.as_deref().unwrap_or(&self.raw)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectKind {
    Read,
    Write,
    Append,
    ReadWrite,
    Clobber,
    Dup,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Redirect {
    pub kind: RedirectKind,
    pub target: Word,
}

/// Where a simple command was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Top,
    Substitution,
    ProcessSubstitution,
    Function,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SimpleCommand {
    pub assignments: Vec<(String, Word)>,
    pub argv: Vec<Word>,
    pub redirects: Vec<Redirect>,
    pub origin: Origin,
    pub depth: u32,
    /// Index of the pipeline this command belongs to (unique per extract
    /// call chain) and its position in it.
    pub pipeline: usize,
    pub position: usize,
    pub pipeline_len: usize,
    /// Text given on stdin by heredocs and here-strings (what a shell or
    /// interpreter reading its program from stdin would run).
    pub stdin_text: Vec<Word>,
}

#[derive(Debug, Default, Clone)]
pub struct Extracted {
    pub commands: Vec<SimpleCommand>,
    /// Constructs we could not follow (each requires approval).
    pub unhandled: Vec<String>,
    /// Functions the command defines.
    pub functions: Vec<String>,
    /// Variables a `for` loop of the command sets.
    pub loop_vars: Vec<String>,
}

fn options() -> brush_parser::ParserOptions {
    brush_parser::ParserOptions::default()
}

/// Parse `src` and collect its simple commands. `Err` carries the parse
/// error's message.
pub fn extract(
    src: &str,
    depth: u32,
    out: &mut Extracted,
    next_pipeline: &mut usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        out.unhandled.push(format!(
            "nesting deeper than {MAX_DEPTH} levels is not followed"
        ));
        return Ok(());
    }
    if src.len() > MAX_INPUT {
        return Err(format!("the command is longer than {MAX_INPUT} bytes"));
    }
    let read_as: String;
    let mut w = Walker {
        src,
        out,
        depth,
        next_pipeline,
        origin: if depth == 0 {
            Origin::Top
        } else {
            Origin::Substitution
        },
    };
    // Most commands are one simple command of plain and simply quoted
    // words (`cargo test --lib`, `git commit -m 'fix x'`): read those
    // without the full parser, which gives the same result for them.
    if let Some(words) = lone_simple_command(src) {
        w.lone_simple(&words);
        return Ok(());
    }
    // brush's tokenizer can panic on malformed input (a heredoc inside
    // `${`): that is a command we cannot read, a parse error.
    let first = std::panic::catch_unwind(|| full_parse(src))
        .unwrap_or_else(|_| Err("the parser failed on this input".to_string()));
    let program = match first {
        Ok(p) => p,
        // What bash tolerates and brush does not (a trailing backslash, a
        // heredoc closed by the end of input) is read as bash reads it.
        Err(e) => match tolerate::bash_reading(src, &e) {
            Some(s) => {
                read_as = s;
                w.src = &read_as;
                // brush's tokenizer can panic on what the rewrite makes of
                // input it already rejected (a heredoc inside `$(`): that
                // stays the original parse error.
                let retry = std::panic::catch_unwind(|| full_parse(&read_as));
                retry.ok().and_then(Result::ok).ok_or(e)?
            }
            None => return Err(e),
        },
    };
    for cc in &program.complete_commands {
        w.compound_list(cc);
    }
    Ok(())
}

/// brush's full parse of `src`. Its `tokenize_str` keeps a process-wide
/// cache of the last 64 inputs (a lock, a hash and a copy of the input and
/// of its tokens on every call); commands are seldom repeated, so this
/// tokenizes directly.
fn full_parse(src: &str) -> Result<ast::Program, String> {
    let tokens =
        brush_parser::uncached_tokenize_str(src, &brush_parser::TokenizerOptions::default())
            .map_err(|e| e.to_string())?;
    brush_parser::parse_tokens(&tokens, &options()).map_err(|e| e.to_string())
}

struct Walker<'a> {
    src: &'a str,
    out: &'a mut Extracted,
    depth: u32,
    next_pipeline: &'a mut usize,
    origin: Origin,
}

impl Walker<'_> {
    /// One simple command of plain words (see [`lone_simple_command`]), as
    /// the parser's walk would record it.
    fn lone_simple(&mut self, words: &[&str]) {
        let id = *self.next_pipeline;
        *self.next_pipeline += 1;
        let argv = words.iter().map(|w| self.word(w)).collect();
        self.out.commands.push(SimpleCommand {
            assignments: Vec::new(),
            argv,
            redirects: Vec::new(),
            origin: self.origin,
            depth: self.depth,
            pipeline: id,
            position: 0,
            pipeline_len: 1,
            stdin_text: Vec::new(),
        });
    }

    fn compound_list(&mut self, l: &ast::CompoundList) {
        for item in &l.0 {
            self.and_or(&item.0);
        }
    }

    fn and_or(&mut self, l: &ast::AndOrList) {
        self.pipeline(&l.first);
        for a in &l.additional {
            match a {
                ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p),
            }
        }
    }

    fn pipeline(&mut self, p: &ast::Pipeline) {
        let id = *self.next_pipeline;
        *self.next_pipeline += 1;
        let len = p.seq.len();
        for (i, c) in p.seq.iter().enumerate() {
            self.command(c, id, i, len);
        }
    }

    fn command(&mut self, c: &ast::Command, pipeline: usize, position: usize, len: usize) {
        match c {
            ast::Command::Simple(s) => self.simple(s, pipeline, position, len),
            ast::Command::Compound(cc, redirects) => {
                self.compound(cc);
                if let Some(r) = redirects {
                    let rs = self.redirects(&r.0);
                    if !rs.is_empty() {
                        // Redirects of a compound apply to everything in it;
                        // record them as a command of their own.
                        self.out.commands.push(SimpleCommand {
                            assignments: Vec::new(),
                            argv: Vec::new(),
                            redirects: rs,
                            origin: self.origin,
                            depth: self.depth,
                            pipeline,
                            position,
                            pipeline_len: len,
                            stdin_text: Vec::new(),
                        });
                    }
                }
            }
            ast::Command::Function(f) => {
                self.out.functions.push(f.fname.value.clone());
                let saved = self.origin;
                self.origin = Origin::Function;
                self.compound(&f.body.0);
                self.origin = saved;
            }
            ast::Command::ExtendedTest(t, _) => {
                let text = t.to_string();
                self.scan_text_for_substitutions(&text, "[[ ]] test");
            }
        }
    }

    fn compound(&mut self, c: &ast::CompoundCommand) {
        match c {
            ast::CompoundCommand::BraceGroup(b) => self.compound_list(&b.list),
            ast::CompoundCommand::Subshell(s) => self.compound_list(&s.list),
            ast::CompoundCommand::ForClause(f) => {
                self.out.loop_vars.push(f.variable_name.clone());
                for w in f.values.iter().flatten() {
                    self.word(&w.value);
                }
                self.compound_list(&f.body.list);
            }
            ast::CompoundCommand::CaseClause(c) => {
                self.word(&c.value.value);
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value);
                    }
                    if let Some(l) = &item.cmd {
                        self.compound_list(l);
                    }
                }
            }
            ast::CompoundCommand::IfClause(i) => {
                self.compound_list(&i.condition);
                self.compound_list(&i.then);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.compound_list(c);
                    }
                    self.compound_list(&e.body);
                }
            }
            ast::CompoundCommand::WhileClause(w) | ast::CompoundCommand::UntilClause(w) => {
                self.compound_list(&w.0);
                self.compound_list(&w.1.list);
            }
            ast::CompoundCommand::Arithmetic(a) => {
                // brush reads `( (cmd) )` as arithmetic too; bash runs it as
                // two nested subshells unless the `((` is one token.
                let start = a.loc.start.index;
                let adjacent = self.src.chars().skip(start).take(2).eq("((".chars());
                if adjacent {
                    self.scan_text_for_substitutions(&a.expr.value, "arithmetic");
                    self.check_arithmetic(&a.expr.value);
                } else {
                    self.substitution(&a.expr.value);
                }
            }
            ast::CompoundCommand::ArithmeticForClause(a) => {
                self.scan_text_for_substitutions(&a.to_string(), "arithmetic for loop");
                self.compound_list(&a.body.list);
            }
            ast::CompoundCommand::Coprocess(c) => {
                self.out
                    .unhandled
                    .push("coproc runs a command in the background".into());
                let id = *self.next_pipeline;
                *self.next_pipeline += 1;
                self.command(&c.body, id, 0, 1);
            }
        }
    }

    /// `$(( ))` / `(( ))` text that is not arithmetic (`((rm -rf /))`): bash
    /// rejects it, but we do not guess; it is an unhandled construct. Text
    /// with expansions is only checked by bash after expanding (brush's
    /// arithmetic parser wants it expanded), so it is left alone here.
    fn check_arithmetic(&mut self, text: &str) {
        if !text.contains('$')
            && !text.contains('`')
            && brush_parser::arithmetic::parse(text).is_err()
        {
            self.out.unhandled.push(format!(
                "(( {} )) is not an arithmetic expression bash accepts",
                text.trim()
            ));
        }
    }

    /// Constructs whose inner text we do not parse word by word (`[[ ]]`,
    /// arithmetic): the command substitutions written in them run as any
    /// other does and are analysed as commands. One in single quotes (which
    /// bash still evaluates there: `[[ $n -eq 'a[$(id)]' ]]`) or in an
    /// array subscript, a process substitution, or one we cannot delimit
    /// is an unhandled construct, as before.
    fn scan_text_for_substitutions(&mut self, text: &str, what: &str) {
        if !(text.contains("$(")
            || text.contains('`')
            || text.contains("<(")
            || text.contains(">("))
        {
            return;
        }
        let readable = !text.contains("<(")
            && !text.contains(">(")
            && !quoted_substitution(text)
            && !subscript_substitution(text);
        match super::forms::written_substitutions(text).filter(|_| readable) {
            Some(subs) => {
                for s in subs {
                    self.substitution(&s);
                }
            }
            None => self.out.unhandled.push(format!(
                "a command substitution inside {what} is not analysed"
            )),
        }
    }

    fn simple(&mut self, s: &ast::SimpleCommand, pipeline: usize, position: usize, len: usize) {
        let mut cmd = SimpleCommand {
            assignments: Vec::new(),
            argv: Vec::new(),
            redirects: Vec::new(),
            origin: self.origin,
            depth: self.depth,
            pipeline,
            position,
            pipeline_len: len,
            stdin_text: Vec::new(),
        };
        let mut items: Vec<&ast::CommandPrefixOrSuffixItem> = Vec::new();
        if let Some(p) = &s.prefix {
            items.extend(p.0.iter());
        }
        let name_item;
        if let Some(w) = &s.word_or_name {
            name_item = ast::CommandPrefixOrSuffixItem::Word(w.clone());
            items.push(&name_item);
        }
        if let Some(sfx) = &s.suffix {
            items.extend(sfx.0.iter());
        }
        for item in items {
            match item {
                ast::CommandPrefixOrSuffixItem::Word(w) => {
                    let word = self.word(&w.value);
                    cmd.argv.push(word);
                }
                // After the command name, `x=y` is an argument (`dd of=...`,
                // `alias ls=...`); for declaration builtins it is also an
                // assignment.
                ast::CommandPrefixOrSuffixItem::AssignmentWord(a, w) if !cmd.argv.is_empty() => {
                    let word = self.word(&w.value);
                    let declares = cmd.argv[0].literal.as_deref().is_some_and(|n| {
                        matches!(n, "export" | "declare" | "typeset" | "local" | "readonly")
                    });
                    if declares {
                        let name = match &a.name {
                            ast::AssignmentName::VariableName(n) => n.clone(),
                            ast::AssignmentName::ArrayElementName(n, _) => n.clone(),
                        };
                        cmd.assignments.push((name, word.clone()));
                    }
                    cmd.argv.push(word);
                }
                ast::CommandPrefixOrSuffixItem::AssignmentWord(a, _) => {
                    let name = match &a.name {
                        ast::AssignmentName::VariableName(n) => n.clone(),
                        ast::AssignmentName::ArrayElementName(n, _) => n.clone(),
                    };
                    match &a.value {
                        ast::AssignmentValue::Scalar(w) => {
                            let word = self.word(&w.value);
                            cmd.assignments.push((name, word));
                        }
                        ast::AssignmentValue::Array(vals) => {
                            for (_, w) in vals {
                                let word = self.word(&w.value);
                                cmd.assignments.push((name.clone(), word));
                            }
                        }
                    }
                }
                ast::CommandPrefixOrSuffixItem::IoRedirect(r) => {
                    let rs = self.redirects(std::slice::from_ref(r));
                    cmd.redirects.extend(rs);
                    match r {
                        ast::IoRedirect::HereDocument(_, doc) => cmd.stdin_text.push(Word {
                            raw: doc.doc.value.clone(),
                            literal: Some(doc.doc.value.clone()),
                            quoted: false,
                            ansi_c: false,
                            params: Vec::new(),
                            tilde: false,
                        }),
                        ast::IoRedirect::HereString(_, w) => {
                            let word = self.word(&w.value);
                            cmd.stdin_text.push(word);
                        }
                        _ => {}
                    }
                }
                ast::CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                    self.nested_list(&sub.list, Origin::ProcessSubstitution);
                    cmd.argv.push(Word {
                        raw: "<(...)".into(),
                        literal: None,
                        quoted: false,
                        ansi_c: false,
                        params: Vec::new(),
                        tilde: false,
                    });
                }
            }
        }
        self.out.commands.push(cmd);
    }

    fn nested_list(&mut self, l: &ast::CompoundList, origin: Origin) {
        if self.depth + 1 > MAX_DEPTH {
            self.out.unhandled.push(format!(
                "nesting deeper than {MAX_DEPTH} levels is not followed"
            ));
            return;
        }
        let saved = (self.origin, self.depth);
        self.origin = origin;
        self.depth += 1;
        self.compound_list(l);
        (self.origin, self.depth) = saved;
    }

    fn redirects(&mut self, rs: &[ast::IoRedirect]) -> Vec<Redirect> {
        let mut out = Vec::new();
        for r in rs {
            match r {
                ast::IoRedirect::File(_, kind, target) => {
                    let k = match kind {
                        ast::IoFileRedirectKind::Read => RedirectKind::Read,
                        ast::IoFileRedirectKind::Write => RedirectKind::Write,
                        ast::IoFileRedirectKind::Append => RedirectKind::Append,
                        ast::IoFileRedirectKind::ReadAndWrite => RedirectKind::ReadWrite,
                        ast::IoFileRedirectKind::Clobber => RedirectKind::Clobber,
                        ast::IoFileRedirectKind::DuplicateInput
                        | ast::IoFileRedirectKind::DuplicateOutput => RedirectKind::Dup,
                    };
                    match target {
                        ast::IoFileRedirectTarget::Filename(w)
                        | ast::IoFileRedirectTarget::Duplicate(w) => {
                            let word = self.word(&w.value);
                            out.push(Redirect {
                                kind: k,
                                target: word,
                            });
                        }
                        ast::IoFileRedirectTarget::Fd(_) => {}
                        ast::IoFileRedirectTarget::ProcessSubstitution(_, sub) => {
                            self.nested_list(&sub.list, Origin::ProcessSubstitution);
                            // `cmd < <(...)`: its input is computed.
                            out.push(Redirect {
                                kind: k,
                                target: Word {
                                    raw: "<(...)".into(),
                                    literal: None,
                                    quoted: false,
                                    ansi_c: false,
                                    params: Vec::new(),
                                    tilde: false,
                                },
                            });
                        }
                    }
                }
                ast::IoRedirect::HereDocument(_, doc) => {
                    if doc.requires_expansion {
                        match brush_parser::word::parse_heredoc(&doc.doc.value, &options()) {
                            Ok(pieces) => {
                                let mut scratch = WordAcc::default();
                                self.pieces(&pieces, &mut scratch, false);
                            }
                            Err(e) => self.out.unhandled.push(format!("heredoc body: {e}")),
                        }
                    }
                }
                ast::IoRedirect::HereString(_, w) => {
                    self.word(&w.value);
                }
                ast::IoRedirect::OutputAndError(w, append) => {
                    let word = self.word(&w.value);
                    out.push(Redirect {
                        kind: if *append {
                            RedirectKind::Append
                        } else {
                            RedirectKind::Write
                        },
                        target: word,
                    });
                }
            }
        }
        out
    }

    /// Analyse one word: follow its substitutions, compute its literal value.
    fn word(&mut self, raw: &str) -> Word {
        // Fast path: plain characters and quotes without expansions in them
        // (most words); anything else goes to brush's word parser.
        if let Some((literal, quoted)) = plain_word_value(raw) {
            return Word {
                raw: raw.to_string(),
                literal: Some(literal),
                quoted,
                ansi_c: false,
                params: Vec::new(),
                tilde: false,
            };
        }
        let mut acc = WordAcc::default();
        match brush_parser::word::parse(raw, &options()) {
            Ok(pieces) => self.pieces(&pieces, &mut acc, false),
            Err(e) => {
                self.out.unhandled.push(format!("word {raw:?}: {e}"));
                acc.expanded = true;
            }
        }
        Word {
            raw: raw.to_string(),
            literal: (!acc.expanded).then_some(acc.text),
            quoted: acc.quoted,
            ansi_c: acc.ansi_c,
            params: acc.params,
            tilde: acc.tilde,
        }
    }

    fn pieces(&mut self, pieces: &[WordPieceWithSource], acc: &mut WordAcc, in_dq: bool) {
        for p in pieces {
            match &p.piece {
                WordPiece::Text(t) => acc.text.push_str(t),
                WordPiece::SingleQuotedText(t) => {
                    acc.quoted = true;
                    acc.text.push_str(t);
                }
                WordPiece::AnsiCQuotedText(t) => {
                    acc.quoted = true;
                    acc.ansi_c = true;
                    acc.text.push_str(&decode_ansi_c(t));
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    acc.quoted = true;
                    self.pieces(inner, acc, true);
                }
                WordPiece::EscapeSequence(e) => {
                    acc.quoted = true;
                    let body = e.strip_prefix('\\').unwrap_or(e);
                    if in_dq && !matches!(body.chars().next(), Some('$' | '`' | '"' | '\\' | '\n'))
                    {
                        acc.text.push_str(e);
                    } else if body != "\n" {
                        acc.text.push_str(body);
                    }
                }
                WordPiece::TildeExpansion(_) => {
                    acc.tilde = true;
                    acc.text.push('~');
                }
                WordPiece::ParameterExpansion(pe) => {
                    acc.expanded = true;
                    self.parameter(pe, acc);
                }
                WordPiece::CommandSubstitution(s) | WordPiece::BackquotedCommandSubstitution(s) => {
                    acc.expanded = true;
                    self.substitution(s);
                }
                WordPiece::ArithmeticExpression(a) => {
                    acc.expanded = true;
                    self.scan_text_for_substitutions(&a.value, "arithmetic");
                    self.check_arithmetic(&a.value);
                }
            }
        }
    }

    fn parameter(&mut self, pe: &ParameterExpr, acc: &mut WordAcc) {
        // The parameter's name, for credential checks. Every variant of
        // ParameterExpr carries a `Parameter`; its Debug form names it.
        let dbg = format!("{pe:?}");
        for marker in ["Named(\"", "name: \""] {
            let mut rest = dbg.as_str();
            while let Some(i) = rest.find(marker) {
                rest = &rest[i + marker.len()..];
                if let Some(j) = rest.find('"') {
                    acc.params.push(rest[..j].to_string());
                    rest = &rest[j..];
                }
            }
        }
        let nested = match pe {
            ParameterExpr::UseDefaultValues { default_value, .. } => default_value.clone(),
            ParameterExpr::AssignDefaultValues { default_value, .. } => default_value.clone(),
            ParameterExpr::UseAlternativeValue {
                alternative_value, ..
            } => alternative_value.clone(),
            ParameterExpr::IndicateErrorIfNullOrUnset { error_message, .. } => {
                error_message.clone()
            }
            _ => None,
        };
        if let Some(text) = nested {
            // `${x:-$(cmd)}`: the default is itself a word.
            let w = self.word(&text);
            acc.params.extend(w.params);
        } else if dbg.contains("$(") || dbg.contains('`') {
            self.out
                .unhandled
                .push("a command substitution inside a parameter expansion is not analysed".into());
        }
    }

    fn substitution(&mut self, src: &str) {
        if self.depth + 1 > MAX_DEPTH {
            self.out.unhandled.push(format!(
                "nesting deeper than {MAX_DEPTH} levels is not followed"
            ));
            return;
        }
        let mut inner = Extracted::default();
        match extract(src, self.depth + 1, &mut inner, self.next_pipeline) {
            Ok(()) => {
                for mut c in inner.commands {
                    if c.origin == Origin::Top {
                        c.origin = Origin::Substitution;
                    }
                    self.out.commands.push(c);
                }
                self.out.unhandled.extend(inner.unhandled);
                self.out.functions.extend(inner.functions);
            }
            Err(e) => self
                .out
                .unhandled
                .push(format!("command substitution does not parse: {e}")),
        }
    }
}

/// A command substitution inside an array subscript (`a[$(id)]`), which
/// arithmetic may evaluate again.
fn subscript_substitution(text: &str) -> bool {
    let b = text.as_bytes();
    (1..b.len()).any(|i| {
        b[i] == b'['
            && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
            && text[i..]
                .split(']')
                .next()
                .is_some_and(|sub| sub.contains("$(") || sub.contains('`'))
    })
}

/// A command substitution written inside single quotes.
fn quoted_substitution(text: &str) -> bool {
    let (mut single, mut double, mut escaped) = (false, false, false);
    let b = text.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        match c {
            _ if escaped => escaped = false,
            b'\\' if !single => escaped = true,
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b'$' if single && b.get(i + 1) == Some(&b'(') => return true,
            b'`' if single => return true,
            _ => {}
        }
    }
    false
}

#[derive(Default)]
struct WordAcc {
    text: String,
    expanded: bool,
    quoted: bool,
    ansi_c: bool,
    tilde: bool,
    params: Vec<String>,
}

#[cfg(test)]
mod tests;
