#!/usr/bin/env python3
"""Build tests/corpus/public_corpus.tsv, the classifier's development corpus
from public sources, offline, from snapshots already on this machine.

    python3 tests/corpus/build.py [--mirror DIR] [--out FILE]

Sources (each read from a local git snapshot at the commit recorded below,
so a re-run gives the same file):

- GTFOBins (GPL-3.0): every entry's `shell`, `command`, `file-write` and
  `reverse-shell` function, the entry's published code (not a selection).
  All dangerous: each runs another program, a shell, writes a file outside,
  or opens a network shell.
- tldr-pages (CC-BY-4.0): the examples of `pages/common` and `pages/linux`,
  labelled from each example's own description (see `tldr_label`).
- NL2Bash (GPL-3.0; data/bash/all.cm): every distinct command, labelled by
  what it can do (see `nl2bash_label`).
- tests/corpus/agent_bypasses.tsv: rows written by hand from the published
  agent-approval bypasses of 2025-26 (each row names its issue thread).

Row: family TAB label TAB split TAB command TAB source. A newline inside a
command is written as the character U+23CE. `split` is `heldout` when the
first 8 hex digits of the SHA-256 of the command are 0 modulo 4, else
`dev`: deterministic, independent of the classifier, and never tuned on.
"""

import argparse
import hashlib
import os
import re
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
NEWLINE = "\u23ce"

SOURCES = {
    "gtfobins": ("GTFOBins+GTFOBins.github.io", "7382261ef936e35896ba70e7a6b833352ffb9a22"),
    "tldr": ("tldr-pages+tldr", "08e345f42639f67d99282813247ac670dc6e87cb"),
    "nl2bash": ("TellinaTool+nl2bash", "466c5fe873ab08c7cc0112ea1521cc6ad9c20992"),
}
GTFO_FUNCTIONS = ["shell", "command", "file-write", "reverse-shell"]


def git(repo, *args):
    return subprocess.run(
        ["git", "--git-dir", repo, *args], check=True, capture_output=True
    ).stdout.decode("utf-8", "replace")


def split_of(command):
    h = int(hashlib.sha256(command.encode()).hexdigest()[:8], 16)
    return "heldout" if h % 4 == 0 else "dev"


# --------------------------------------------------------------------------
# GTFOBins
# --------------------------------------------------------------------------
def gtfobins(repo, commit):
    names = git(repo, "ls-tree", "--name-only", f"{commit}:_gtfobins").split()
    for name in sorted(names):
        text = git(repo, "show", f"{commit}:_gtfobins/{name}")
        docs = [d for d in yaml.safe_load_all(text) if d]
        if not docs:
            continue
        functions = docs[0].get("functions") or {}
        for func in GTFO_FUNCTIONS:
            for item in functions.get(func) or []:
                code = (item.get("code") or "").strip()
                if code:
                    yield (f"gtfobins.{func}", "dangerous", code, f"gtfobins:{name}")


# --------------------------------------------------------------------------
# tldr
# --------------------------------------------------------------------------
PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")


def fill(example):
    """tldr's `{{...}}` placeholders as concrete words: an option
    alternation `{{[-r|--recursive]}}` takes its long form, `{{a|b}}` its
    first alternative (a dry run's mode not `none`), `{{path/to/a path/to/b
    ...}}` drops the `...`."""

    def one(m):
        inner = m.group(1)
        if inner.startswith("[") and inner.endswith("]") and "|" in inner:
            return inner[1:-1].split("|")[-1]
        if "|" in inner and " " not in inner:
            inner = inner.split("|")[0]
        return " ".join(w for w in inner.split(" ") if w != "...").strip() or "x"

    # A dry run's mode (`--dry-run={{none|server|client}}`, in examples
    # described as a preview) is not `none`, which turns the dry run off.
    example = re.sub(r"(--dry-run=\{\{)none\|", r"\1", example)
    # `\{\{`/`\}\}` are tldr's literal braces (a Go template), not a placeholder.
    example = example.replace("\\{\\{", "\x00").replace("\\}\\}", "\x01")
    filled = PLACEHOLDER.sub(one, example)
    return filled.replace("\x00", "{{").replace("\x01", "}}")


READ_VERBS = re.compile(
    r"^(list|show|display|print|view|get|search|find|describe|check|compare|preview|"
    r"count|inspect|validate|verify|query|read|see|look up|lint|diff|"
    r"(do|perform|run) a dry[- ]run|dry[- ]run|simulate|generate and show)\b",
    re.I,
)
DANGER_VERBS = re.compile(
    r"^(delete|remove|destroy|drop|purge|wipe|erase|reset|flush|kill|terminate|"
    r"shut ?down|reboot|power off|uninstall|(force[- ])?push|publish|deploy|upload|"
    r"apply|release|merge|revoke|overwrite)\b",
    re.I,
)
# Objects whose state lives outside the workspace. Not among them: a
# repository's own branches, tags, commits and bookmarks (the checkout is in
# the workspace: `git branch --delete x`, `git tag --delete t` are changes the
# rehearsal shows; a remote one is named by "remote", "upstream", "origin"),
# and "cache" (a build cache in the workspace, `cargo clean`, or one in the
# home: the description does not say which, so the row is not labelled).
OUTSIDE_OBJECTS = re.compile(
    r"\b(remote|upstream|origin|cluster|clusters|instance|instances|bucket|buckets|"
    r"database|databases|table|tables|collection|container|containers|image|images|"
    r"volume|volumes|pod|pods|deployment|deployments|service|services|stack|stacks|"
    r"server|servers|release|releases|account|accounts|user|users|vm|vms|"
    r"virtual machine|snapshot|snapshots|secret|secrets|record|records|queue|queues|"
    r"topic|topics|namespace|namespaces|node|nodes|process|processes|infrastructure|"
    r"resource|resources|app|apps|application|applications|project|projects|"
    r"repository|repositories|registry|package|packages|key|keys|zone|domain|"
    r"function|functions|job|jobs|workflow|index|indices|tenant|organization|team|"
    r"webhook|pipeline|environment|environments|droplet|machine|machines|disk|disks|"
    r"partition|filesystem)\b",
    re.I,
)
PRIVILEGE = re.compile(r"(^|[;&|(]\s*)(sudo|doas|su|pkexec)\s")
# State that lives in the workspace: a project's own files, its manifest and
# its dependencies (`npm uninstall x` edits package.json and node_modules,
# `cargo clean` removes target/), whatever the verb. A project named with
# "a" (`surge teardown`: "Remove a project") is a remote one.
WORKSPACE_OBJECTS = re.compile(
    r"\b(the|this|current|the current) project('s)?\b|package\.json|composer\.(json|lock)|"
    r"\ba dependency\b|\bas a dependency\b|list of dependencies|\bfrom [^,]{0,30}dependencies\b|"
    r"not listed in dependencies|\bgenerated project files\b",
    re.I,
)
# Pages of tools that keep secrets (the page's summary says so): reading
# from them is what `touches_credentials` asks about, so their read examples
# are not everyday; neither label is taken.
SECRET_KEEPER = re.compile(
    r"password manager|password store|passwords|\bvault\b|keyring|\bwallet\b|credentials|"
    r"\bsecrets\b|sensitive data|authentication tokens|ssh keys",
    re.I,
)
# Commands that change only the shell they run in (its directory stack,
# variables, hash table, line editor, jobs): nothing outside the command.
SHELL_STATE = re.compile(r"^(popd|pushd|unset|hash|unhash|unalias|zle|z|disown)\b|^kill %")
REDIRECT_TOKEN = re.compile(r"^\d*(>>?|<)$")


def workspace_operand(word):
    """A placeholder path in the workspace: relative `path/to/...` (an
    absolute `/path/to/...` is outside it)."""
    w = word.strip("'\"")
    return "path/to" in w and not w.startswith(("/", "~"))


# Project tools whose remove/uninstall/prune/clean edit the project's own
# manifest, lockfile, dependency directory or build output, all in the
# workspace (`cargo clean` removes target/, `npm prune` node_modules/),
# unless told to act globally or on a cache or tool in the home.
# `cargo uninstall` is never the project's: it removes a binary `cargo
# install` put in ~/.cargo/bin, a tool in the home (labelling correction,
# twelfth round).
PROJECT_TOOLS = {"npm", "yarn", "pnpm", "bun", "poetry", "uv", "cargo", "composer", "bazel"}


def project_change(command):
    ws = command.split()
    if len(ws) < 2 or ws[0] not in PROJECT_TOOLS:
        return False
    if any(w in ("-g", "--global", "global", "tool", "cache", "self", "env", "--system") for w in ws[1:]):
        return False
    if ws[0] == "cargo" and ws[1] == "uninstall":
        return False
    return ws[1] in ("remove", "rm", "uninstall", "un", "prune", "clean")


# An "image" is a container or disk image among OUTSIDE_OBJECTS, but a
# picture on the pages of image-processing tools (`pnmcrop`, `exiftool`,
# `htmlq`'s `img` nodes): when it is the only object outside the description
# names, the verb does not send it anywhere, and the command names files in
# the workspace (and nothing remote), the example edits those files, a change
# the rehearsal shows (labelling correction, twelfth round).
SENDS = re.compile(r"^(upload|(force[- ])?push|publish|deploy|release)\b", re.I)


def picture_edit(description, command):
    objects = {m.group(0).lower() for m in OUTSIDE_OBJECTS.finditer(description)}
    if not objects or not objects <= {"image", "images"} or SENDS.match(description):
        return False
    words = command.split()
    if any("://" in w or re.search(r"\w:\w", w) for w in words):
        return False
    return any(workspace_operand(w) for w in words)


# Version-control tools whose repository is the local checkout.
DVCS = {"git", "hg", "jj", "fossil"}


def tldr_label(description, command, summary=""):
    """From the example's description: a read or a plan is everyday (not
    on a page of a tool that keeps secrets); a delete, reset, push,
    deploy, publish or kill is dangerous unless every operand is a
    workspace file (`rm path/to/file` is a change the rehearsal shows) or
    the description says the state is the project's own; a command that
    changes only its shell is not labelled; anything else is not labelled
    (None)."""
    if PRIVILEGE.search(command):
        return None
    if READ_VERBS.match(description) and "dry" not in description.lower()[:0]:
        return None if SECRET_KEEPER.search(summary) else "everyday"
    if DANGER_VERBS.match(description):
        if SHELL_STATE.match(command):
            return None
        words = [w for seg in command.split("|") for w in seg.split()[1:]]
        # A distributed version-control tool's repository is its checkout,
        # in the workspace: its subcommand word names an action, not an
        # operand (`git rm path/to/file` removes a workspace file and its
        # index entry, a change the rehearsal shows).
        if command.split()[0] in DVCS and words:
            words = words[1:]
        operands = [
            w for w in words if not w.strip("'\"").startswith("-") and not REDIRECT_TOKEN.match(w)
        ]
        if operands and all(workspace_operand(w) for w in operands):
            return "everyday"
        if WORKSPACE_OBJECTS.search(description) or project_change(command):
            return "everyday"
        if picture_edit(description, command):
            return "everyday"
        # Only state that lives outside the workspace: a remote, a cloud
        # or cluster object, a database, the system's processes, users,
        # packages and services. Anything else is not labelled.
        if OUTSIDE_OBJECTS.search(description):
            return "dangerous"
    return None


def tldr(repo, commit):
    for section in ["common", "linux"]:
        names = git(repo, "ls-tree", "--name-only", f"{commit}:pages/{section}").split()
        for name in sorted(names):
            if not name.endswith(".md"):
                continue
            text = git(repo, "show", f"{commit}:pages/{section}/{name}")
            summary = " ".join(
                l[2:] for l in text.splitlines() if l.startswith("> ") and "More information" not in l
            )
            description = None
            for line in text.splitlines():
                if line.startswith("- "):
                    description = line[2:].rstrip(":").strip()
                elif line.startswith("`") and line.endswith("`") and description:
                    cmd = fill(line[1:-1]).strip()
                    label = tldr_label(description, cmd, summary)
                    if label and cmd:
                        fam = "tldr.read" if label == "everyday" else "tldr.destructive"
                        if label == "everyday" and DANGER_VERBS.match(description):
                            fam = "tldr.workspace_change"
                        yield (fam, label, cmd, f"tldr:{section}/{name[:-3]}")
                    description = None


# --------------------------------------------------------------------------
# NL2Bash
# --------------------------------------------------------------------------
DELETERS = {"rm", "shred", "unlink", "rmdir", "srm", "wipe"}
SYSTEM_CHANGERS = {
    "kill", "pkill", "killall", "shutdown", "reboot", "halt", "poweroff", "mount",
    "umount", "mkfs", "fdisk", "parted", "useradd", "userdel", "usermod",
    "groupadd", "passwd", "chpasswd", "systemctl", "service", "iptables", "modprobe",
    "insmod", "rmmod", "swapon", "swapoff", "sysctl", "chroot", "visudo",
    "launchctl", "chsh", "chfn", "hostnamectl", "timedatectl",
}
LISTING_FORMS = {
    "mount": {"-l", "--show-labels"},
    "swapon": {"--show", "-s", "--summary", "--noheadings", "--bytes", "--raw"},
}
REMOTE = {"ssh", "scp", "sftp", "ftp", "telnet", "nc", "netcat", "ncat", "socat", "mail",
          "sendmail", "mutt", "rsh", "rcp", "rlogin", "ssh-copy-id", "sshpass"}
# Programs that change the files they are given in place (compress,
# rename, convert, rewrite): run by find on files outside, they change
# files outside.
IN_PLACE = {"gzip", "bzip2", "xz", "zstd", "compress", "lzma", "rename", "mogrify",
            "dos2unix", "unix2dos", "chattr", "truncate", "shred", "mv", "sed", "perl"}
# Variables whose value is code the shell or the loader runs later
# (principle `hides_what_runs`).
CODE_VARIABLES = re.compile(r"(^|[;&|(]\s*|\bexport\s+)(PROMPT_COMMAND|BASH_ENV|ENV|LD_PRELOAD|LD_LIBRARY_PATH)=")
# Words that start a compound command or a pipeline before its program.
SHELL_KEYWORDS = {"do", "then", "else", "elif", "{", "(", "!", "time", "((", "while", "until", "if"}
WRITERS_LAST = {"cp", "mv", "ln", "install", "rsync"}
WRITERS_ALL = {"chmod", "chown", "chgrp", "touch", "mkdir", "tee", "truncate", "chattr"}


def outside(path, computed=True):
    """A path outside a workspace the command runs in: absolute (not
    /tmp, /dev/null, /dev/tty), the home, or (`computed`) computed at run time. A
    delete of a path computed at run time is a delete of unknown targets
    (principle `deletes`); a write to one is not known to be outside, and
    the rehearsal shows where it wrote, so writers pass `computed=False`."""
    p = path.strip("'\"")
    # The terminal (`tee /dev/tty`) is where output is shown, as for the
    # redirects checked in nl2bash_label.
    # (/dev/shm is the system's memory-backed temporary directory, scratch
    # like /tmp.)
    if p.startswith(("/tmp", "/dev/null", "/dev/std", "/var/tmp", "/dev/shm")) or p == "/dev/tty":
        return False
    # The command runs at the workspace's root: `..` climbs out of it.
    if p.startswith(("/", "~", "$HOME", "${HOME}", "../")) or p == "..":
        return True
    return computed and p.startswith("$")


def written_outside(path):
    return outside(path, computed=False)


def split_words(segment):
    """Words split at blanks outside quotes, the quotes kept (`mv {}
    "/a b/"` has three words, not four); a segment whose quotes do not
    close (cut at a `|` or `;` inside them) is split at every blank."""
    out, cur, quote, esc = [], "", None, False
    for ch in segment.strip():
        if esc:
            cur += ch
            esc = False
        elif ch == "\\" and quote != "'":
            cur += ch
            esc = True
        elif quote:
            cur += ch
            quote = None if ch == quote else quote
        elif ch in "'\"":
            cur += ch
            quote = ch
        elif ch.isspace():
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    if quote:
        return [w for w in re.split(r"\s+", segment.strip()) if w]
    return out + ([cur] if cur else [])


def words_of(segment, loose=False):
    ws = [w for w in re.split(r"\s+", segment.strip()) if w] if loose else split_words(segment)
    while ws and ws[0] in SHELL_KEYWORDS:
        ws = ws[1:]
    return ws


SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "csh", "tcsh"}


def shell_string(ws):
    """The program string of `sh -c STRING` (its outer quotes taken off),
    or None. Its positional parameters are the names it is given (find's
    `{}`, xargs' list), which find's start paths and xargs' input are
    judged for: here they stand as a plain name, `FILE`."""
    if ws[0].split("/")[-1] not in SHELLS:
        return None
    for k, w in enumerate(ws[1:-1], 1):
        if re.fullmatch(r"-[a-z]*c", w):
            s = ws[k + 1]
            if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
                s = s[1:-1]
            return re.sub(r"\$\{?[0-9@*]\}?", "FILE", s)
    return None


def flatten_substitutions(cmd):
    """The command with each command substitution (`$(...)`, backquotes)
    standing as one word, `$SUB`, and the substitutions' own bodies: the
    outer command keeps its words after one (`cp $(find ...) /usr/local/bin`
    still copies into /usr/local/bin)."""
    bodies = []
    pattern = re.compile(r"`([^`]*)`|\$\(([^()`]*)\)")
    while True:
        m = pattern.search(cmd)
        if not m:
            return cmd, bodies
        bodies.append(m.group(1) if m.group(1) is not None else m.group(2))
        cmd = cmd[: m.start()] + "$SUB" + cmd[m.end():]


def split_operands(ws, valued):
    """Operands of a command whose options in `valued` take the next word."""
    out, k = [], 1
    while k < len(ws):
        w = ws[k]
        if w == "--":
            out.extend(ws[k + 1:])
            break
        if w in valued:
            k += 2
            continue
        if not w.startswith("-") or w == "-":
            out.append(w)
        k += 1
    return out


def tar_writes(ws):
    """The archive `tar -c/-r/-u -f ARCHIVE` (or `tar czf ARCHIVE`) writes."""
    first = ws[1].lstrip("-") if len(ws) > 1 else ""
    mode = any(re.match(r"-[a-zA-Z]*[cru]", w) for w in ws[1:]) or (
        re.fullmatch(r"[a-zA-Z]*[cru][a-zA-Z]*", first) is not None
    ) or any(w in ("--create", "--append", "--update") for w in ws)
    if not mode:
        return None
    for k, w in enumerate(ws[1:], 1):
        if w.startswith("--file="):
            return w.split("=", 1)[1]
        cluster = w[1:] if w.startswith("-") and not w.startswith("--") else (w if k == 1 else "")
        if (w == "--file" or cluster.endswith("f")) and k + 1 < len(ws):
            return ws[k + 1]
    return None


SYSTEM_PACKAGERS = {"apt", "apt-get", "aptitude", "yum", "dnf", "zypper", "pacman", "rpm",
                    "dpkg", "brew", "port", "snap", "emerge", "apk"}
PACKAGE_CHANGES = {"install", "localinstall", "groupinstall", "reinstall", "remove", "erase",
                   "purge", "uninstall", "update", "upgrade", "dist-upgrade", "autoremove",
                   "unlink", "link", "-i", "-e", "-U", "-S", "-R", "-Syu", "--install",
                   "--remove", "--purge", "--erase"}
# (GNU xargs' `-i`, `-l` and `-e` take their value only attached: `-i[R]`,
# so `xargs -i cp {} D` runs `cp`; `--replace[=R]` and `--max-lines[=N]`
# only after `=`.)
XARGS_VALUED = {"-I", "-n", "-P", "-d", "-L", "-s", "-E", "-a", "--max-args",
                "--max-procs", "--delimiter", "--arg-file"}


def remote_operand(word):
    """An rsync/scp operand on another host: `host:path`, `user@host:path`,
    `host::module`, `rsync://...` (not a local path with a colon after a
    slash)."""
    w = word.strip("'\"")
    if w.startswith("rsync://"):
        return True
    head = w.split(":", 1)[0]
    return ":" in w and head != "" and "/" not in head and not head.startswith("-")


def sub_commands(ws):
    """The commands a command runs in its own words: `xargs [opts] PROG
    ...` and find's `-exec/-execdir/-ok PROG ... ;` (their targets are the
    files found or read). The names find hands its program (`{}`) are
    under its start paths: under one outside the workspace, they are
    outside too (`find /x -exec ln -s {} .` links to files outside)."""
    prog = ws[0].split("/")[-1]
    if prog == "xargs":
        i = 1
        while i < len(ws) and ws[i].startswith("-"):
            i += 2 if ws[i] in XARGS_VALUED else 1
        if i < len(ws):
            yield ws[i:]
    if prog == "find":
        starts = []
        for w in ws[1:]:
            if w.startswith("-") or w in ("(", "\\(", "!", "\\!"):
                break
            starts.append(w)
        out = next((s.strip("'\"").rstrip("/") for s in starts if written_outside(s)), None)
        found = (lambda w: re.sub(r"\\?\{\\?\}", out + "/FOUND", w)) if out else (lambda w: w)
        i = 1
        while i < len(ws):
            if ws[i] in ("-exec", "-execdir", "-ok", "-okdir"):
                j = i + 1
                while j < len(ws) and ws[j] not in (";", "\\;", "';'", "+"):
                    j += 1
                if j > i + 1:
                    yield [found(w) for w in ws[i + 1:j]]
                i = j
            i += 1


LINE_FILTERS = {"grep", "egrep", "fgrep", "sort", "uniq", "head", "tail", "tac", "shuf"}


def pipe_stages(cmd):
    """The stages of a pipeline, split at `|` outside quotes."""
    out, cur, quote = [], "", None
    for ch in cmd:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "|":
            out.append(cur)
            cur = ""
            continue
        cur += ch
    return out + [cur]


def workspace_listing(cmd):
    """A pipeline whose first stage lists the workspace (`find` over
    relative paths without `..`, following no symlinks and printing names
    as found; `ls` of relative paths) and whose other stages before the
    last only pass whole lines (`grep` without `-o`, `sort`, `tail`...):
    the names the last stage (xargs) reads are workspace files, so its
    program's targets are not from elsewhere (principle `deletes`)."""
    if re.search(r";|&&|\|\||\$\(|`|<|>", cmd):
        return False
    stages = [words_of(x) for x in pipe_stages(cmd)]
    if len(stages) < 2 or not all(stages):
        return False
    first = stages[0]
    prog = first[0].split("/")[-1]
    relative = lambda w: not w.strip("'\"").startswith(("/", "~", "$")) and ".." not in w.split("/")
    if prog == "find":
        starts = []
        for w in first[1:]:
            if w.startswith("-") or w in ("(", "\\(", "!", "\\!"):
                break
            starts.append(w)
        if not all(relative(w) for w in starts):
            return False
        if any(w in ("-L", "-H", "-follow", "-printf", "-fprintf", "-fprint", "-ls", "-exec",
                     "-execdir", "-ok", "-okdir") for w in first):
            return False
    elif prog == "ls":
        if not all(w.startswith("-") or relative(w) for w in first[1:]):
            return False
    else:
        return False
    for mid in stages[1:-1]:
        if mid[0] not in LINE_FILTERS:
            return False
        if mid[0] in ("grep", "egrep", "fgrep") and any(
            w == "--only-matching" or re.match(r"-[a-zA-Z]*o", w) for w in mid[1:]
        ):
            return False
    return stages[-1][0] == "xargs" and not any(
        w == "-a" or w.startswith("--arg-file") for w in stages[-1]
    )


def changes_outside(ws, seg, piped, listed=False):
    """Dangerous (True) when this one command changes something outside
    the workspace or past what a rehearsal shows (see nl2bash_label).
    `listed`: its input is a listing of the workspace (workspace_listing)."""
    prog = ws[0].split("/")[-1]
    args = [w for w in ws[1:] if not w.startswith("-")]
    flags = ws[1:]
    if prog in DELETERS and (
        any(outside(a) for a in args)
        or piped and not args
        or re.search(r"\$\(|`", seg)
    ):
        return True
    # A system tool's listing form shows what is set up and changes
    # nothing: `mount` and `swapon` with no operand and only options that
    # shape the listing (`mount | grep nfs`, `mount -l`, `swapon --show`).
    if prog in LISTING_FORMS and not args and all(
        f.split("=")[0] in LISTING_FORMS[prog] for f in flags
    ):
        return False
    if prog in SYSTEM_CHANGERS:
        return True
    # Network configuration shown is read; set, it is a system change
    # (`ifconfig eth0` shows, `ifconfig eth0 down` changes).
    if prog == "ifconfig" and len(args) >= 2:
        return True
    if prog in ("ip", "route") and any(
        w in ("add", "del", "delete", "set", "flush", "change", "replace", "append", "up", "down")
        for w in args
    ):
        return True
    # crontab and at install commands that run later, unless they list
    # (`crontab -l`, `at -l`, `at -c N`).
    if prog == "crontab" and not any(re.match(r"-[a-z]*l", w) for w in flags):
        return True
    if prog == "at" and not any(w in ("-l", "-c", "-q") for w in flags):
        return True
    if prog in REMOTE:
        return True
    if prog in ("rsync", "scp") and any(remote_operand(a) for a in args):
        return True
    if prog in SYSTEM_PACKAGERS and any(w in PACKAGE_CHANGES for w in flags[:3]):
        return True
    if prog == "hostname" and len(ws) == 2 and not ws[1].startswith("-"):
        return True
    if prog in ("curl", "wget") and re.search(r"\s(-X\s*(POST|PUT|DELETE)|-T|--upload|-d|--data|--post)", seg):
        return True
    if prog == "git" and args[:1] and args[0] in ("push",):
        return True
    if prog in WRITERS_LAST and len(args) >= 2 and written_outside(args[-1]):
        return True
    # A link in the workspace to a file outside is a way out (the
    # classifier judges a link by where it points): `ln -s /x y`, `ln -s /x`.
    # (A relative target is resolved from the link's directory, so only an
    # absolute or home target is known to be outside.)
    if prog == "ln" and any(
        outside(a, computed=False) and not a.strip("'\"").startswith("..")
        for a in (args[:-1] if len(args) >= 2 else args)
    ):
        return True
    if prog in ("tar", "gtar", "bsdtar") and (archive := tar_writes(ws)) and written_outside(archive):
        return True
    # Giving files to root takes a privilege no rehearsal has.
    if prog in ("chown", "chgrp") and args and re.match(r"root([:.]|$)", args[0]):
        return True
    if prog == "date" and any(w in ("-s", "--set") or w.startswith("--set=") for w in flags):
        return True
    # `cp -t DIR`, `--target-directory=DIR`: the destination comes first.
    for k, w in enumerate(ws[1:], 1):
        if prog in WRITERS_LAST and w == "-t" and k + 1 < len(ws) and written_outside(ws[k + 1]):
            return True
        if prog in WRITERS_LAST and w.startswith("--target-directory=") and written_outside(w.split("=", 1)[1]):
            return True
    if prog in WRITERS_ALL and any(written_outside(a) for a in args[1 if prog in ("chmod", "chown", "chgrp") else 0:]):
        return True
    if prog == "dd" and any(a.startswith("of=") and written_outside(a[3:]) for a in ws):
        return True
    # (sed's and perl's first operand is the script, unless given by -e.)
    files = args if any(w in ("-e", "-f", "--expression") for w in flags) else args[1:]
    if prog in ("sed", "perl") and any(re.match(r"-[a-z]*i", w) for w in ws[1:]) and any(written_outside(a) for a in files):
        return True
    # cpio's pass-through mode copies into its directory operand.
    if prog == "cpio" and any(re.match(r"-[a-zA-Z0-9]*p", w) for w in flags) and args and written_outside(args[-1]):
        return True
    # tar extracting into a directory outside (`tar -xf A -C /dest`).
    if prog in ("tar", "gtar", "bsdtar") and not tar_writes(ws):
        for k, w in enumerate(ws[1:], 1):
            target = None
            if w in ("-C", "--directory") and k + 1 < len(ws):
                target = ws[k + 1]
            elif w.startswith("--directory="):
                target = w.split("=", 1)[1]
            if target and written_outside(target):
                return True
    # find writes the file its `-fprint`/`-fprintf`/`-fls` names.
    if prog == "find" and any(
        w in ("-fprint", "-fprint0", "-fprintf", "-fls") and k + 1 < len(ws) and written_outside(ws[k + 1])
        for k, w in enumerate(ws)
    ):
        return True
    # split writes its pieces under its second operand, the prefix.
    if prog == "split":
        ops = split_operands(ws, {"-a", "-b", "-C", "-l", "-n", "-t"})
        if len(ops) >= 2 and written_outside(ops[1]):
            return True
    # A shell's program string is a command it runs.
    string = shell_string(ws)
    if string is not None and nl2bash_label(string) == "dangerous":
        return True
    for sub in sub_commands(ws):
        if changes_outside(sub, " ".join(sub), not listed):
            return True
    return False


def nl2bash_label(cmd):
    """Dangerous when the command can reach past the workspace or past
    what a rehearsal shows: privilege, system or process changes, system
    packages, remote hosts (rsync/scp to another host included), a delete
    or write whose target is outside or comes from elsewhere (a pipe,
    xargs, a command substitution, `read`), in any command it runs (find's
    `-exec`, xargs' program), code piped to a shell; else everyday."""
    if PRIVILEGE.search(cmd + " ") or re.search(r"\bsu\s+-", cmd):
        return "dangerous"
    if re.search(r"\|\s*(sudo\s+)?(ba|z|k|da)?sh\b(\s|$)", cmd):
        return "dangerous"
    # A redirect outside (not a `>` inside quoted text; `..` climbs out,
    # the system's temporary directories are scratch, as for any write).
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "''", cmd)
    for m in re.finditer(r">>?(?!&)\s*([^\s;|&()<>]+)", unquoted):
        if written_outside(m.group(1)):
            return "dangerous"
    if CODE_VARIABLES.search(cmd):
        return "dangerous"
    # A delete in a loop over names read at run time (`while read f; do rm "$f"`).
    if re.search(r"\bread\b", cmd) and re.search(r"\b(do|;)\s*(rm|shred|unlink)\s", cmd):
        return "dangerous"
    # A delete of a command substitution's output (`rm $(find ...)`).
    if re.search(r"(^|[;&|(]\s*)(rm|shred|unlink|rmdir)\s[^|;&]*(\$\(|`)", cmd):
        return "dangerous"
    listed = workspace_listing(cmd)
    # `;` ends a command, `\;` is find's argument; `\|` is never a pipe
    # (`-regex '.*\.\(avi\|flv\)'`, `grep 'a\|b'`).
    # Each command substitution is judged on its own, and stands as one
    # word in the command around it.
    flat, bodies = flatten_substitutions(cmd)
    segments = [
        seg
        for part in [flat, *bodies]
        for seg in re.split(r"\|\||&&|(?<!\\);|(?<!\\)\||\$\(|`", part)
    ]
    for i, seg in enumerate(segments):
        ws = words_of(seg)
        if not ws:
            continue
        prog = ws[0].split("/")[-1]
        # (Every word, a shell string's too: `-exec sh -c 'rm "$0"'`.)
        loose = words_of(seg, loose=True)
        if prog == "find" and ("-delete" in loose or any(w in ("-exec", "-execdir", "-ok") for w in loose)):
            ws = loose
            starts = []
            for w in ws[1:]:
                if w.startswith("-") or w in ("(", "\\(", "!", "\\!"):
                    break
                starts.append(w)
            deletes = "-delete" in ws or any(w.split("/")[-1] in DELETERS for w in ws)
            # The files found are changed in place by these; `cp`, `ln`,
            # `install`, `rsync` only read them (their destination is
            # judged as a sub-command's).
            changes = deletes or any(
                w.split("/")[-1] in WRITERS_ALL | IN_PLACE
                for w in ws
            )
            if changes and (not starts or any(outside(s, computed=deletes) for s in starts)):
                return "dangerous" if starts else None
            ws = words_of(seg)
        # `yes | rm` deletes nothing: rm does not read its targets from
        # stdin (xargs does, and its program is judged as piped).
        if changes_outside(ws, seg, False, listed and prog == "xargs"):
            return "dangerous"
    return "everyday"


def nl2bash(repo, commit):
    text = git(repo, "show", f"{commit}:data/bash/all.cm")
    for line in text.splitlines():
        cmd = line.strip()
        if not cmd:
            continue
        label = nl2bash_label(cmd)
        if label:
            yield (f"nl2bash.{label}", label, cmd, "nl2bash:data/bash/all.cm")


def bash_parses(cmd):
    """`bash -n` is the oracle for "this is a shell command": a row bash
    itself rejects (tldr's key bindings `<Ctrl f>`, NL2Bash's truncated
    quotes and typographic quotes, GTFOBins' lines typed into a program's
    own prompt) is not one, and neither label applies to it."""
    r = subprocess.run(["bash", "-n", "-c", cmd], capture_output=True)
    return r.returncode == 0


# Package registries' host names are kept out of the repository (code,
# docs and this corpus): a URL whose registrable domain (its last two
# labels) is a registry's is rewritten to an example name, keeping its
# leading labels (`upload.` of an upload host; a leading `registry.` is
# dropped), e.g. `registry.<domain>` becomes `registry.example`. The
# domains are listed by the first 16 hex digits of their SHA-256, so their
# names are not written here either.
REGISTRY_DOMAINS = {"8743857e3ea00fd1", "3ca29e55be4befa4", "a4aa2ac280bb8d1a"}
URL_HOST = re.compile(r"(https?://)([A-Za-z0-9.-]+)")


def example_registry(cmd):
    def one(m):
        labels = m.group(2).split(".")
        domain = ".".join(labels[-2:])
        if hashlib.sha256(domain.encode()).hexdigest()[:16] not in REGISTRY_DOMAINS:
            return m.group(0)
        lead = labels[:-2]
        if lead and lead[0] == "registry":
            lead = lead[1:]
        return m.group(1) + ".".join(lead + ["registry", "example"])

    return URL_HOST.sub(one, cmd)


def hand_written(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            family, label, cmd, source = line.split("\t")
            yield (family, label, cmd.replace(NEWLINE, "\n"), source)


HEADER = """\
# dryrun's public development corpus for the classifier. GENERATED by
# tests/corpus/build.py from snapshots of public sources; do not edit by hand.
#
# Columns: family TAB label TAB split TAB command TAB source.
# label: dangerous (must need approval) or everyday (must not).
# split: heldout when sha256(command)[:8] as a number is 0 mod 4, else dev.
#        The held-out part is measured, never tuned on.
# The character \u23ce stands for a newline inside a command.
#
# Sources, licences and attribution:
# - GTFOBins, https://github.com/GTFOBins/GTFOBins.github.io at commit
#   {gtfobins}, GPL-3.0 (the curated list of Unix binaries
#   that can be used to bypass local security restrictions, by Emilio Pinna,
#   Andrea Cardaci and contributors). Rows: the code of every entry's shell,
#   command, file-write and reverse-shell function, verbatim.
# - tldr-pages, https://github.com/tldr-pages/tldr at commit
#   {tldr}, CC-BY-4.0, (c) the tldr-pages team and contributors.
#   Rows: examples of pages/common and pages/linux, placeholders filled in,
#   labelled from each example's description (build.py: tldr_label).
# - NL2Bash, https://github.com/TellinaTool/nl2bash at commit
#   {nl2bash}, GPL-3.0 (Lin et al., "NL2Bash: A Corpus and
#   Semantic Parser for Natural Language Interface to the Linux Operating
#   System", LREC 2018). Rows: every distinct command of data/bash/all.cm,
#   labelled by what it can do (build.py: nl2bash_label).
# - tests/corpus/agent_bypasses.tsv: rows written by hand from published
#   agent-approval bypasses (2025-26); each row's source names the thread.
#
# Rows bash itself does not parse (`bash -n`) are not taken: they are not
# shell commands (key bindings, truncated quotes, a program's own prompt).
#
# Rows: {total} ({counts}).
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mirror", default="/work/.mirror")
    ap.add_argument("--out", default=os.path.join(HERE, "public_corpus.tsv"))
    a = ap.parse_args()
    rows = []
    seen = set()
    gens = []
    for key, (dirname, commit) in SOURCES.items():
        repo = os.path.join(a.mirror, dirname, "repo")
        if not os.path.isdir(repo):
            sys.exit(f"missing snapshot {repo} (fetch github:{dirname.replace('+', '/')})")
        have = git(repo, "cat-file", "-t", commit).strip()
        if have != "commit":
            sys.exit(f"{repo} does not hold commit {commit}")
        gens.append(globals()[key](repo, commit))
    gens.append(hand_written(os.path.join(HERE, "agent_bypasses.tsv")))
    dropped = 0
    not_bash = {}
    for gen in gens:
        for family, label, cmd, source in gen:
            if "\t" in cmd or "\r" in cmd or NEWLINE in cmd:
                dropped += 1
                continue
            if cmd in seen:
                continue
            seen.add(cmd)
            if not bash_parses(cmd):
                not_bash[family] = not_bash.get(family, 0) + 1
                continue
            # The split is of the source's command, before host names change.
            shown = example_registry(cmd)
            rows.append((family, label, split_of(cmd), shown.replace("\n", NEWLINE), source))
    counts = {}
    for r in rows:
        k = f"{r[1]} {r[2]}"
        counts[k] = counts.get(k, 0) + 1
    header = HEADER.format(
        gtfobins=SOURCES["gtfobins"][1],
        tldr=SOURCES["tldr"][1],
        nl2bash=SOURCES["nl2bash"][1],
        total=len(rows),
        counts=", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
    )
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(header)
        for r in rows:
            f.write("\t".join(r) + "\n")
    print(f"{a.out}: {len(rows)} rows ({dropped} with tabs dropped); {counts}")
    print(f"rows bash does not parse, not taken: {dict(sorted(not_bash.items()))}")


if __name__ == "__main__":
    main()
