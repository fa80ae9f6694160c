//! Inline interpreter code (`python3 -c`, `node -e`, `perl -e`, `php -r`, a
//! heredoc fed to an interpreter): what it does that cannot be seen before
//! it runs, or that no rehearsal shows (docs/classifier.md, "Inline code").
//!
//! A rehearsal observes the files and processes of inline code like those
//! of a script; what the classifier adds is the answer *before anything
//! runs* and the effects the rehearsal cannot show or the live lane does
//! not replay. So inline code asks when it starts or signals processes,
//! calls native code, deletes, writes outside the workspace, reaches the
//! network, decodes and runs a payload, or runs code the same command
//! wrote; it is left to the rehearsal (`exec.inline_code`, WRITE) when it
//! reads files, prints, parses JSON or computes. An interpreter the system
//! policy trusts (`inline_code.trust`) is left to the rehearsal always.

use std::sync::OnceLock;

use regex::Regex;

use super::{Ctx, Word, base_name};

/// The language family of an interpreter, for the words that mean "start
/// a process" in it (Python's `exec(` evaluates code; Perl's runs a
/// program).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lang {
    Python,
    Js,
    /// Perl, Ruby, PHP, Lua, Tcl and the rest: `system`, `exec` and
    /// backticks start programs.
    Other,
}

fn lang(base: &str) -> Option<Lang> {
    let trimmed = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    Some(match trimmed {
        "python" | "py" | "pypy" | "ipython" => Lang::Python,
        "node" | "nodejs" | "deno" | "bun" => Lang::Js,
        "perl" | "ruby" | "irb" | "php" | "lua" | "luajit" | "Rscript" | "julia" | "tclsh"
        | "wish" | "osascript" | "pwsh" | "powershell" | "jshell" | "jrunscript" | "jjs"
        | "groovy" | "scala" | "elixir" | "erl" | "guile" | "racket" | "expect" | "octave"
        | "octave-cli" => Lang::Other,
        _ => return None,
    })
}

/// The arguments that are inline code: the value of `-c`, `-e`, `-r`, ...
/// (perl's clusters such as `-ne`, `-pi -e`), or, for `deno eval`, the
/// argument after it.
fn code_args<'a>(base: &str, args: &'a [Word]) -> Vec<&'a str> {
    let trimmed = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let flags: &[&str] = match trimmed {
        "python" | "py" | "pypy" | "ipython" => &["-c"],
        "node" | "nodejs" | "bun" => &["-e", "--eval", "-p", "--print"],
        "deno" => &["eval", "-e", "--eval"],
        "perl" | "ruby" | "irb" => &["-e", "-E"],
        "php" => &["-r"],
        "lua" | "luajit" | "Rscript" | "julia" | "osascript" | "jrunscript" | "groovy"
        | "elixir" | "erl" | "guile" | "racket" | "expect" | "scala" | "octave" | "octave-cli" => {
            &["-e", "-E", "-eval", "--eval", "-c"]
        }
        "pwsh" | "powershell" => &["-c", "-Command", "-command", "-EncodedCommand", "-e"],
        _ => &[],
    };
    let perl_like = matches!(trimmed, "perl" | "ruby");
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].text();
        // `perl -ne CODE`, `-lane`, `-pi -e`: a cluster ending in `e`.
        let cluster = perl_like
            && a.starts_with('-')
            && !a.starts_with("--")
            && a.len() > 2
            && a[1..].chars().all(|c| c.is_ascii_alphabetic())
            && a.ends_with(['e', 'E']);
        if flags.contains(&a) || cluster {
            if let Some(w) = args.get(i + 1) {
                out.push(w.text());
            }
            i += 2;
            continue;
        }
        // `python3 -cCODE`.
        if trimmed == "python" && a.starts_with("-c") && a.len() > 2 && !a.starts_with("--") {
            out.push(&a[2..]);
        }
        i += 1;
    }
    out
}

struct Patterns {
    process: Regex,
    process_other: Regex,
    native: Regex,
    delete: Regex,
    write: Regex,
    home: Regex,
    network: Regex,
    decode: Regex,
    evaluates: Regex,
    evaluates_python: Regex,
    code_from_input: Regex,
    dynamic_name: Regex,
    loads_code: Regex,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| {
        let re = |s: &str| Regex::new(s).expect("inline-code pattern");
        Patterns {
            // Starts or signals processes, in any language.
            process: re(concat!(
                r"\bos\s*\.\s*(system|popen\w*|exec[lv]\w*|spawn\w*|fork\w*|kill\w*|posix_spawn\w*|startfile|execute)\b",
                r"|\bsubprocess\b|\bpty\s*\.|\bcommands\s*\.\s*get|\bcreate_subprocess_\w+|\bsignal\s*\.\s*pthread_kill",
                r"|\bchild_process\b|\bexec(Sync|File|FileSync)\b|\bspawn(Sync)?\s*\(|\bprocess\s*\.\s*kill\b",
                r"|\bBun\s*\.\s*spawn|\bDeno\s*\.\s*(run|Command)\b",
                r"|\bshell_exec\b|\bpassthru\b|\bproc_open\b|\bpcntl_exec\b|\bposix_kill\b|\bpopen\b",
                r"|\bio\s*\.\s*popen|\bOpen3\b|\bProcess\s*\.\s*(spawn|kill|exec)|\bKernel\s*\.\s*(system|exec|spawn)",
                r"|\bRuntime\s*\.\s*getRuntime|\bProcessBuilder\b|(?i:Start-Process|Invoke-Expression|Invoke-Item)",
                r"|\bdo\s+shell\s+script\b",
            )),
            // Perl, Ruby, PHP, Tcl...: `system`, `exec`, `spawn`, `fork`,
            // `kill`, `qx`, backticks, `%x(...)`.
            process_other: re(concat!(
                r"(^|[^.\w$>:])(system|exec|spawn|fork|kill|qx|syscall)\s*[\s(\x22'`{/|]",
                r"|`|%x[({\[]",
            )),
            // Native code: any system call, none of which can be read.
            native: re(r"\bctypes\b|\bcdll\b|\bdlopen\b|\bFFI\b|\bffi\s*\.|\bFiddle\b|\bDynaLoader\b|\bsyscall\s*\("),
            // Deletes (files or trees).
            delete: re(concat!(
                r"\bos\s*\.\s*(remove|unlink|rmdir|removedirs)\b|\bshutil\s*\.\s*rmtree\b|\brmtree\b",
                r"|\.unlink\s*\(|\.rmdir\s*\(|\b(rm|rmdir|unlink)(Sync)?\s*\(|\bfs\s*\.\s*(promises\s*\.\s*)?(rm|unlink|rmdir)\w*",
                r"|\bunlink\b|\bFile\s*\.\s*delete|\bFileUtils\s*\.\s*(rm|remove)\w*|\bDir\s*\.\s*(delete|rmdir|unlink)",
                r"|(?i:Remove-Item)|\bos\s*\.\s*remove",
            )),
            // Writes or changes files (where: see `home` and the quoted
            // paths).
            write: re(concat!(
                r"\bopen\s*\([^)]*,\s*(mode\s*=\s*)?[\x22'][rb]?[wax+]|\.write_(text|bytes)\s*\(",
                r"|\.(touch|mkdir|rename|replace|symlink_to|hardlink_to|chmod)\s*\(|\bO_(WRONLY|RDWR|CREAT|APPEND|TRUNC)\b",
                r"|\bos\s*\.\s*(rename|replace|chmod|chown|mkdir|makedirs|symlink|link|truncate|utime|setxattr|removexattr|mkfifo|mknod)\b",
                r"|\bshutil\s*\.\s*(copy\w*|move|chown)\b",
                r"|\b(writeFile|appendFile|copyFile|createWriteStream|mkdir|symlink|rename|chmod|cp)(Sync)?\s*\(",
                r"|\bfile_put_contents\b|\bfwrite\b|\bfopen\s*\([^)]*[\x22'][wax]",
                r"|\bFile\s*\.\s*(write|open\s*\([^)]*[\x22'][wa])|\bFileUtils\s*\.\s*(cp|mv|mkdir|touch|ln)\w*",
                r"|\bopen\s*\(?\s*(my\s+)?\$?\w*\s*,?\s*[\x22']?\s*(>|\+<)",
                r"|(?i:Set-Content|Out-File|Add-Content|New-Item)|\bio\s*\.\s*open\s*\([^)]*[\x22'][wa]",
                // Java's writers (jrunscript, groovy, jshell), and a call's
                // last argument that is a write mode in any language
                // (julia's `open(f, path, "w")`, octave's `fopen(p, "w")`).
                r"|\b(FileWriter|FileOutputStream|PrintWriter|RandomAccessFile)\b|\bFiles\s*\.\s*(write|copy|move|createFile)",
                r"|,\s*[\x22'][rb+]*[wa][rb+]*[\x22']\s*\)",
            )),
            // The home directory, named without a literal path.
            home: re(concat!(
                r"expanduser|\bPath\s*\.\s*home\b|\bhomedir\s*\(|\bgetenv\s*\(\s*[\x22']HOME|environ\s*(\[|\.get\s*\()\s*[\x22']HOME",
                r"|\$ENV\s*\{\s*[\x22']?HOME|\bENV\s*\[\s*[\x22']HOME|process\s*\.\s*env\s*\.\s*HOME|\$HOME\b|[\x22']~/",
            )),
            // Reaches the network: connections, lookups, HTTP clients.
            network: re(concat!(
                r"\bsocket\b|\burllib\d?\b|\burlopen\b|\brequests\s*\.|\bhttpx\b|\bhttp\s*\.\s*client\b|\baiohttp\b",
                r"|\bftplib\b|\bsmtplib\b|\btelnetlib\b|\bparamiko\b|\bxmlrpc\b|\bwebsocket",
                r"|\bfetch\s*\(|\brequire\s*\(\s*[\x22'](node:)?(net|http|https|dgram|tls|http2)[\x22']|\bnet\s*\.\s*(connect|createConnection|Socket)",
                r"|\bhttps?\s*\.\s*(get|request)\s*\(|\bXMLHttpRequest\b|\bWebSocket\b|\bDeno\s*\.\s*(connect|listen)",
                r"|\bNet::HTTP\b|\bopen-uri\b|\bURI\s*\.\s*open\b|\bTCPSocket\b|\bUDPSocket\b|\bIO::Socket\b|\bLWP\b|\bHTTP::Tiny\b",
                r"|\bcurl_exec\b|\bfsockopen\b|\bfile_get_contents\s*\(\s*[\x22']https?:|/dev/(tcp|udp)/",
                r"|(?i:Invoke-WebRequest|Invoke-RestMethod|Net\.WebClient|Net\.Sockets)",
            )),
            // Decodes text into bytes or code.
            decode: re(concat!(
                r"\bb(64|32|16|85)decode\b|\bbase64\b|\bcodecs\s*\.\s*decode\b|\bfromhex\b|\bunhexlify\b|\bdecompress\b",
                r"|\batob\s*\(|\bBuffer\s*\.\s*from\s*\([^)]*[\x22'](base64|hex)|\bfromCharCode\b|\bpack\s*\(\s*[\x22']H",
                r"|\bdecode_base64\b|\bMIME::Base64\b|\bunpack\s*\(?\s*[\x22']m|\bBase64\b|\bdecode64\b|\bstr_rot13\b|\bgzinflate\b|\bgzuncompress\b",
                r"|\brot13\b|(?i:FromBase64String|EncodedCommand)",
            )),
            // Evaluates text as code (JS, Perl, Ruby, PHP...).
            evaluates: re(concat!(
                r"(^|[^.\w])(eval|exec|compile|assert|create_function|instance_eval|class_eval|module_eval|loadstring|dostring)\s*[\s(\x22'{]",
                r"|\bFunction\s*\(|\bvm\s*\.\s*run\w*|\bload\s*\(|\bimport\s*\(",
            )),
            // Python: `exec(`, `eval(`, `compile(`, `__import__(`.
            evaluates_python: re(r"(^|[^.\w])(exec|eval|compile|__import__)\s*\("),
            // Code read from the input or the environment.
            code_from_input: re(concat!(
                r"(^|[^.\w])(exec|eval|compile|Function|loadstring|load)\s*\(\s*(input\s*\(|raw_input|sys\s*\.\s*stdin|process\s*\.\s*(stdin|env|argv)",
                r"|os\s*\.\s*(environ|getenv)|STDIN|\$ENV|ENV\s*\[|\$_(GET|POST|REQUEST|COOKIE|SERVER)|\$argv|sys\s*\.\s*argv|ARGV)",
                r"|\beval\s*\(?\s*\$(ENV|ARGV|_)",
            )),
            // A name looked up from text computed when it runs: the
            // program it calls cannot be read.
            dynamic_name: re(concat!(
                r"__import__\s*\(\s*[^\x22'\s)]|__import__\s*\(\s*[\x22'][^\x22']*[\x22']\s*[+%]",
                r"|import_module\s*\(\s*[^\x22'\s)]|getattr\s*\([^,]+,\s*[^\x22'\s)]|getattr\s*\([^,]+,\s*[\x22'][^\x22']*[\x22']\s*[+%]",
                r"|globals\s*\(\s*\)\s*\[|__builtins__\s*\.\s*__dict__|\bchr\s*\(\s*\d+\s*\)\s*\+",
            )),
            // Loads code or code objects (`marshal.loads`, `pickle.loads`).
            loads_code: re(r"\b(marshal|pickle|cPickle|dill|shelve)\s*\.\s*loads?\b|\bMarshal\s*\.\s*load\b|\bunserialize\s*\("),
        }
    })
}

/// Code that starts processes, in any language, given in an argument of a
/// program that is not an interpreter known by name (`gimp -b 'import os;
/// os.system("sh")'`, `rview -c ':lua os.execute("sh")'`): the same calls
/// as inline code's, beside a call's parenthesis (`man popen` names a
/// page), and called with a literal (`os.system("sh")`, `subprocess.run(["make"])`:
/// `subprocess.run() failed` in a title is prose).
pub(super) fn starts_processes_in(arg: &str) -> bool {
    if !arg.contains('(') || !arg.contains(['"', '\'', '`']) {
        return false;
    }
    patterns().process.find_iter(arg).any(|m| {
        let near = &arg[m.start()..arg.len().min(m.end() + 40)];
        near.match_indices('(').any(|(i, _)| {
            near[i + 1..]
                .trim_start_matches([' ', '['])
                .starts_with(['"', '\'', '`'])
        })
    })
}

impl Ctx<'_> {
    /// Inline code given to an interpreter as an argument (`-c CODE`).
    pub(super) fn inline_code_args(&mut self, base: &str, args: &[Word], shown: &str) {
        if lang(base).is_none() {
            return;
        }
        let code = code_args(base, args);
        if code.is_empty() {
            return;
        }
        let joined = code.join("\n");
        self.inline_code(base, &joined, shown);
    }

    /// What inline code `code`, run by `base`, does that asks; nothing when
    /// the system policy trusts `base`'s inline code.
    pub(super) fn inline_code(&mut self, base: &str, code: &str, shown: &str) {
        let Some(lang) = lang(base) else {
            return;
        };
        let name = base_name(base);
        if self
            .policy
            .trusted_inline_code
            .iter()
            .any(|t| t == name || t == "*")
        {
            return;
        }
        let p = patterns();
        let mut effects: Vec<(&str, String)> = Vec::new();
        let starts =
            p.process.is_match(code) || (lang == Lang::Other && p.process_other.is_match(code));
        if starts {
            effects.push((
                "exec.inline_code.process",
                format!(
                    "inline {name} code starts or signals processes, which are not in the command"
                ),
            ));
        }
        if p.native.is_match(code) {
            effects.push((
                "exec.inline_code.native",
                format!("inline {name} code calls native code directly: any system call, none of which can be read"),
            ));
        }
        if p.delete.is_match(code) {
            effects.push((
                "exec.inline_code.delete",
                format!("inline {name} code deletes files whose names are computed in code: a delete of unknown targets"),
            ));
        }
        if p.write.is_match(code)
            && let Some(place) = self.outside_in_code(code, p)
        {
            effects.push((
                "exec.inline_code.write_outside",
                format!("inline {name} code writes {place}, outside the workspace: the live lane does not replay it"),
            ));
        }
        if p.network.is_match(code) {
            effects.push((
                "exec.inline_code.network",
                format!("inline {name} code reaches the network: what it sends or fetches is computed in code, not in the command"),
            ));
        }
        let evaluates = match lang {
            Lang::Python => p.evaluates_python.is_match(code),
            _ => p.evaluates.is_match(code),
        };
        let payload = (p.decode.is_match(code) && (evaluates || starts))
            || p.loads_code.is_match(code)
            || p.code_from_input.is_match(code)
            || (lang == Lang::Python && p.dynamic_name.is_match(code));
        if payload {
            effects.push((
                "exec.inline_code.payload",
                format!("inline {name} code decodes, loads or builds code (or the names it calls) and runs it: what runs is not in the command"),
            ));
        }
        if let Some(file) = self.written_code_in(code, lang) {
            effects.push((
                "exec.inline_code.written",
                format!("inline {name} code runs or loads {file}, which this same command wrote: code nobody has reviewed"),
            ));
        }
        for (rule, reason) in effects {
            self.add(rule, reason, shown);
        }
    }

    /// A place outside the workspace that code which writes names: a
    /// quoted absolute path elsewhere, a path climbing out with `..`, or
    /// the home directory.
    fn outside_in_code(&self, code: &str, p: &Patterns) -> Option<String> {
        if let Some(m) = p.home.find(code) {
            return Some(format!("into the home directory ({})", m.as_str()));
        }
        for (i, part) in code.split(['\'', '"', '`']).enumerate() {
            // Odd parts are inside quotes.
            if i % 2 == 0 || part.is_empty() || part.contains(char::is_whitespace) {
                continue;
            }
            if !(part.starts_with('/') || part.starts_with("..")) {
                continue;
            }
            if self.outside_path(part) {
                return Some(part.to_string());
            }
        }
        // Languages whose paths go unquoted (`Out-File /etc/x` in
        // PowerShell, a Tcl or shell-like word): a word outside quotes
        // that is an absolute path (not a regex: no `\ ^ $ * [ | + ?`).
        for (i, part) in code.split(['\'', '"', '`']).enumerate() {
            if i % 2 == 1 {
                continue;
            }
            for t in part.split(|c: char| c.is_whitespace() || ",()=;{}".contains(c)) {
                let path_like = t.len() > 1
                    && (t.starts_with('/') || t.starts_with("../"))
                    && t.trim_start_matches(['/', '.'])
                        .starts_with(|c: char| c.is_ascii_alphabetic())
                    && !t.contains(['\\', '^', '$', '*', '[', '|', '+', '?']);
                if path_like && self.outside_path(t) {
                    return Some(t.to_string());
                }
            }
        }
        None
    }

    /// A path named in code that is outside the workspace (not a device
    /// that only prints).
    fn outside_path(&self, part: &str) -> bool {
        if matches!(
            part,
            "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
        ) || part.starts_with("/dev/fd/")
        {
            return false;
        }
        self.outside_workspace(&self.rebase_on_cwd(&Word::quoted_literal(part)))
    }

    /// A file this string wrote before the interpreter ran that the code
    /// then runs, imports or loads (`echo ... > m.py; python3 -c 'import
    /// m'`, `exec(open('x.py').read())`). Data it only reads is not code.
    fn written_code_in(&self, code: &str, lang: Lang) -> Option<String> {
        let written = &self.written[..self.written_before];
        if written.is_empty() {
            return None;
        }
        let p = patterns();
        let evaluates = match lang {
            Lang::Python => {
                p.evaluates_python.is_match(code)
                    || code.contains("runpy")
                    || code.contains("import_module")
                    || code.contains("spec_from_file_location")
            }
            _ => {
                p.evaluates.is_match(code)
                    || code.contains("require")
                    || code.contains("source")
                    || code.contains("do ")
            }
        };
        for f in written {
            let f = f.trim_matches('"');
            if f.is_empty() || f.starts_with('$') {
                continue;
            }
            let file = base_name(f);
            if evaluates && (code.contains(f) || code.contains(file)) {
                return Some(f.to_string());
            }
            // `import m` after `m.py` was written.
            if let Some(stem) = file.strip_suffix(".py")
                && lang == Lang::Python
                && !stem.is_empty()
                && Regex::new(&format!(
                    r"\b(import\s+{0}\b|from\s+{0}\s+import)",
                    regex::escape(stem)
                ))
                .is_ok_and(|re| re.is_match(code))
            {
                return Some(f.to_string());
            }
        }
        None
    }
}
