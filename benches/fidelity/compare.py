"""What a workflow left in its workspace, normalised, and how two such
manifests differ.

A manifest maps each path (relative to the workspace) to its type, its
permission bits, and its content (a hash; a link's target). The
normalisation, each rule with its reason (docs/fidelity.md repeats them):

- Timestamps are never compared, nor owners: a run at another second is
  not another result, and both lanes write as the same identity.
- `*.pyc` (Python byte code, and pytest's rewritten test modules): the
  source-modification-time field of a timestamp-based file (flags 0) is
  masked, the rest (magic, flags, source size, code) compared. A pip install
  gives each file the time it was written, so the field differs between any
  two runs. A checked-hash file (what SOURCE_DATE_EPOCH makes pip write)
  differs in its flags, and that is reported.
- `target/<profile>/incremental/`: rustc names its incremental sessions by
  time and a random number; only that the directory exists is compared.
- Rust `.rlib` archives: each member's bytes are compared, and its name
  without the session-specific part that incremental compilation puts in
  object names (`NAME.CGU.<random>.rcgu.o`). Two identical debug builds
  differ in that part only.
- cargo's `target/.rustc_info.json` as JSON (its maps are written in hash
  order), and the dep-info files under `.fingerprint/` (`dep-*`: the
  source paths a build read, listed in hash order) as the sorted set of the
  paths they name.
- `.git/` is compared as git sees it, not byte for byte: objects are
  compressed and named by commit ids, which hash the commit dates; the
  index records inode numbers and times; reflogs record times. Compared:
  HEAD, every ref's history (tree, author and committer identities,
  message, in order), the index (mode, blob id, stage, path), each reflog
  (identity and message per entry), and every other file under .git
  (config, hooks, COMMIT_EDITMSG, ...) by type, mode and content; files
  that only hold a commit id (ORIG_HEAD, FETCH_HEAD, ...) by presence.
"""

import hashlib
import json
import os
import re
import stat
from pathlib import Path

# Files under .git that hold a commit id (compared by presence only).
GIT_ID_FILES = {"ORIG_HEAD", "FETCH_HEAD", "AUTO_MERGE", "REBASE_HEAD", "CHERRY_PICK_HEAD", "MERGE_HEAD"}
# Directories under .git read through git (objects, refs) or parsed (logs).
GIT_SEMANTIC_DIRS = {"objects", "refs", "logs"}
GIT_SEMANTIC_FILES = {"index", "packed-refs"}


def _digest(data):
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _pyc(data):
    if len(data) < 16:
        return _digest(data)
    if data[4:8] == b"\0\0\0\0":
        return "pyc(timestamp-based, mtime masked) " + _digest(data[:8] + data[12:])
    return "pyc(hash-based) " + _digest(data)


def _preview(data):
    """A short text file's content, shown beside its hash (a report that
    says what differs, not only that something does)."""
    if len(data) > 160:
        return ""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return ""
    if not text.isprintable() and not all(c.isprintable() or c in "\n\t" for c in text):
        return ""
    return " " + repr(text)


_RCGU = re.compile(rb"\.[0-9a-z]+\.rcgu\.o$")


def _ar(data):
    """An ar archive (a Rust .rlib) as its members, names normalised."""
    pos, longnames, members = 8, b"", []
    while pos + 60 <= len(data):
        hdr = data[pos:pos + 60]
        name = hdr[:16].rstrip(b" ")
        size = int(hdr[48:58].strip() or b"0")
        body = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name == b"//":
            longnames = body
            continue
        if name.startswith(b"/") and name[1:].isdigit():
            off = int(name[1:])
            end = longnames.find(b"/\n", off)
            name = longnames[off:end if end >= 0 else len(longnames)]
        name = _RCGU.sub(b".rcgu.o", name.rstrip(b"/"))
        members.append(name + b" " + _digest(body).encode())
    return "rlib(members, object names normalised) " + _digest(b"\n".join(sorted(members)))


def _content(rel, data):
    """The compared form of a file's content (see the module doc)."""
    name = os.path.basename(rel)
    parts = rel.split(os.sep)
    if name.endswith(".pyc"):
        return _pyc(data)
    if name.endswith(".rlib") and data.startswith(b"!<arch>\n"):
        return _ar(data)
    if parts[0] == "target" and name == ".rustc_info.json":
        try:
            return "json " + _digest(json.dumps(json.loads(data), sort_keys=True).encode())
        except ValueError:
            return _digest(data)
    if parts[0] == "target" and ".fingerprint" in parts and name.startswith("dep-"):
        paths = sorted(set(re.findall(rb"[\x20-\x7e]{3,}", data)))
        return "dep-info(paths, sorted) " + _digest(b"\n".join(paths))
    return _digest(data) + _preview(data)


def _is_incremental(parts):
    return len(parts) >= 3 and parts[0] == "target" and parts[2] == "incremental"


def _entry(path, st, rel=""):
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return f"link -> {os.readlink(path)}"
    if stat.S_ISDIR(st.st_mode):
        return f"dir {mode:o}"
    if stat.S_ISREG(st.st_mode):
        return f"file {mode:o} {_content(rel, Path(path).read_bytes())}"
    return f"other {stat.S_IFMT(st.st_mode):o} {mode:o}"


def _walk(root, rel_top=""):
    """(rel, absolute, stat) for everything under root/rel_top, sorted,
    links not followed."""
    start = os.path.join(root, rel_top) if rel_top else root
    for d, dirs, files in os.walk(start):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(d, name)
            yield os.path.relpath(p, root), p, os.lstat(p)
        # Do not descend into links to directories (os.walk lists them in
        # dirs but, with followlinks=False, does not enter them).


def manifest(root, git=None):
    """The normalised manifest of the workspace at `root`. `git` runs git
    (argv list -> stdout bytes) as the workspace's identity."""
    root = str(root)
    out = {}
    skip_under = []
    for rel, p, st in _walk(root):
        parts = rel.split(os.sep)
        if any(rel.startswith(s + os.sep) for s in skip_under):
            continue
        if parts[0] == ".git" and os.path.isdir(os.path.join(root, ".git")):
            continue
        if _is_incremental(parts):
            if len(parts) == 3:
                out[rel] = "dir (incremental sessions not compared)"
                skip_under.append(rel)
            continue
        out[rel] = _entry(p, st, rel)
    if os.path.isdir(os.path.join(root, ".git")):
        out.update(git_manifest(root, git))
    return out


def _reflogs(root):
    out = {}
    logs = os.path.join(root, ".git", "logs")
    if not os.path.isdir(logs):
        return out
    for rel, p, st in _walk(root, os.path.join(".git", "logs")):
        if not stat.S_ISREG(st.st_mode):
            continue
        lines = []
        for line in Path(p).read_bytes().decode(errors="replace").splitlines():
            head, _, msg = line.partition("\t")
            words = head.split(" ")
            # <old> <new> <name...> <<email>> <seconds> <zone>
            who = " ".join(words[2:-2])
            lines.append(f"{who}\t{msg}")
        out[f"{rel} (entries: identity, message)"] = " | ".join(lines)
    return out


def git_manifest(root, git):
    out = {}
    for rel, p, st in _walk(root, ".git"):
        parts = rel.split(os.sep)
        if len(parts) >= 2 and (parts[1] in GIT_SEMANTIC_DIRS or parts[1] in GIT_SEMANTIC_FILES):
            continue
        if parts[-1] in GIT_ID_FILES or parts[-1].endswith(".lock"):
            out[rel] = "present (holds a commit id)"
            continue
        out[rel] = _entry(p, st, rel)
    if git is None:
        return out
    head = git(["symbolic-ref", "-q", "HEAD"]).strip() or b"detached at tree " + git(["log", "-1", "--format=%T", "HEAD"]).strip()
    out[".git HEAD"] = head.decode(errors="replace")
    refs = git(["for-each-ref", "--format=%(refname)"]).decode().split()
    for ref in refs:
        hist = git(["log", "--topo-order", "--format=%T|%an <%ae>|%cn <%ce>|%B%x00", ref])
        out[f".git ref {ref} (history: tree, author, committer, message)"] = _digest(hist) + " " + hist.decode(errors="replace")[:160].replace("\n", " ")
    index = git(["ls-files", "-s"])
    out[".git index (mode, blob, stage, path)"] = _digest(index)
    out.update(_reflogs(root))
    return out


def diff(a, b, limit=12):
    """What differs between manifest `a` (direct) and `b` (dryrun), as
    lines naming each path."""
    lines = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if x == y:
            continue
        if x is None:
            lines.append(f"{k}: only after dryrun ({y})")
        elif y is None:
            lines.append(f"{k}: only in the direct run ({x})")
        else:
            lines.append(f"{k}: direct {x} / dryrun {y}")
    if len(lines) > limit:
        more = len(lines) - limit
        # Summarise the rest by top-level directory.
        tops = {}
        for line in lines[limit:]:
            top = line.split(":", 1)[0].split(os.sep)[0]
            tops[top] = tops.get(top, 0) + 1
        lines = lines[:limit] + [f"... and {more} more ({', '.join(f'{t}/: {n}' for t, n in sorted(tops.items()))})"]
    return lines


def git_runner(ident, root):
    """A `git` for manifest(): run as the workspace's identity, with
    safe.directory open (the harness reads, it does not trust config)."""

    def run(argv):
        p, _ = ident.run(["git", "-c", "safe.directory=*", "-C", str(root), *argv], timeout=120)
        return p.stdout

    return run
