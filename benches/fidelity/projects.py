"""The real projects: fetched from the package registries with their own
clients (pip download, cargo vendor, npm pack) into a cache, checked
against the pins (pins.json), and laid out as workspace templates.

The cache (default target/fidelity/cache) is filled once; a file whose hash
does not match its pin is an error, never used. Templates are made per
harness run, for one identity, at the very path each workflow then runs in
(a virtual environment and an npm lockfile name absolute paths and the
stand-in registry's port), then moved aside; every lane of every workflow
starts from an exact copy (`cp -a`: same bytes, modes and timestamps).

Projects:
- six: the six 1.17.0 sdist (six.py with its test suite, test_six.py).
- six-venv: six with a project virtual environment (.venv, made with the
  identity's Python) whose pip.conf names the stand-in index.
- six-git: a git repository made from six: two commits on main, a branch
  topic forked from the first, a pre-commit hook that runs the tests, a
  Makefile (check: pytest; build: compileall), a .gitignore for the test
  caches, and an uncommitted edit (for stash). Made with fixed dates, so
  commit ids are the same in every run.
- six-tool: six with a small tool of the project's own,
  tools/cache_state.py, which keeps its state in the home's cache
  (~/.cache/dryrun-fidelity/state.json), as tools do.
- either: the crate either 1.15.0 with its dependencies vendored
  (`cargo vendor`, pinned by either.Cargo.lock) and .cargo/config.toml
  pointing at vendor/.
- line-reporter: the npm package @jsumners/line-reporter 1.0.1, whose
  `npm test` runs its shipped tests with node's test runner.
- npm-app: a project that depends on @jsumners/line-reporter and semver
  (a lockfile resolved against the stand-in registry, named in .npmrc).
"""

import base64
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PINS = json.loads((HERE / "pins.json").read_text())

# Fixed dates for the template repository (commit ids stable across runs).
GIT_DATES = ["2024-01-01T10:00:00+00:00", "2024-01-02T10:00:00+00:00", "2024-01-03T10:00:00+00:00"]

# The six-tool project's own tool: state in the home's cache, as tools keep
# it (the home-cache workflow runs it).
CACHE_STATE_TOOL = """\
import json, pathlib
p = pathlib.Path.home() / ".cache" / "dryrun-fidelity" / "state.json"
p.parent.mkdir(parents=True, exist_ok=True)
p.write_text(json.dumps({"runs": 1}))
print("saved", p)
"""

MAKEFILE = """\
PYTHON ?= python

.PHONY: all check build
all: check build

check:
\t$(PYTHON) -m pytest -q

build:
\t$(PYTHON) -m compileall -q six.py test_six.py
"""

PRE_COMMIT = """\
#!/bin/sh
# Run the test suite before every commit.
exec python -m pytest -q -x >/dev/null
"""


# What `cargo vendor` says to put in .cargo/config.toml.
CARGO_VENDOR_CONFIG = """\
[source.crates-io]
replace-with = "vendored-sources"

[source.vendored-sources]
directory = "vendor"
"""


class FetchError(Exception):
    pass


def _sha256(p):
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def _sri512(p):
    return "sha512-" + base64.b64encode(hashlib.sha512(Path(p).read_bytes()).digest()).decode()


def _run(argv, **kw):
    p = subprocess.run(argv, capture_output=True, **kw)
    if p.returncode != 0:
        raise FetchError(f"{' '.join(map(str, argv))} exited {p.returncode}: {p.stderr.decode(errors='replace')[-2000:]}")
    return p


def _tool(name):
    found = shutil.which(name) or shutil.which(name, path="/root/.cargo/bin")
    if not found:
        raise FetchError(f"{name} is not installed")
    return found


class Cache:
    def __init__(self, root):
        self.root = Path(root)
        self.pypi = self.root / "pypi"
        self.wheels = self.root / "wheels"
        self.npm = self.root / "npm"
        self.crate = self.root / f"{PINS['crate']['name']}-{PINS['crate']['version']}"

    # ---- fetching ------------------------------------------------------
    def fetch(self, log=print):
        for d in (self.pypi, self.wheels, self.npm):
            d.mkdir(parents=True, exist_ok=True)
        # One filler at a time (the bench and a test may start together).
        with open(self.root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._fetch_pypi(log)
            self._fetch_npm(log)
            self._fetch_crate(log)
        # Readable by the unprivileged identity (its venv installs the wheels).
        for d, _, files in os.walk(self.root):
            os.chmod(d, 0o755)
        return self

    def _pip_download(self, dest, requirement, binary):
        py = "/usr/bin/python3"
        fmt = ["--only-binary", ":all:"] if binary else ["--no-binary", ":all:"]
        _run([py, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps", *fmt, "-d", str(dest), requirement])

    def _fetch_pypi(self, log):
        items = [(self.pypi, PINS["pypi"]["sdist"], False)] + [(self.wheels, w, True) for w in PINS["pypi"]["wheels"]]
        # A build backend with PEP 660 editable installs for
        # tests/dependency_installs.rs (not a project's dependency).
        items.append((self.wheels, PINS["pypi"]["build_backend"], True))
        for dest, pin, binary in items:
            f = dest / pin["file"]
            if not f.exists():
                log(f"fetching {pin['requirement']} from PyPI")
                self._pip_download(dest, pin["requirement"], binary)
            if _sha256(f) != pin["sha256"]:
                f.unlink()
                raise FetchError(f"{pin['file']}: sha256 does not match pins.json")

    def _fetch_npm(self, log):
        for pin in PINS["npm"]:
            f = self.npm / pin["file"]
            if not f.exists():
                log(f"fetching {pin['spec']} from the npm registry")
                _run(["npm", "pack", "--silent", "--pack-destination", str(self.npm), pin["spec"]], cwd=self.npm)
            if _sri512(f) != pin["integrity"]:
                f.unlink()
                raise FetchError(f"{pin['file']}: integrity does not match pins.json")

    def _fetch_crate(self, log):
        pin = PINS["crate"]
        done = self.root / f"{self.crate.name}.complete"
        if done.exists():
            return
        log(f"fetching the crate {pin['name']} {pin['version']} and vendoring its dependencies")
        cargo = _tool("cargo")
        with tempfile.TemporaryDirectory(dir=self.root) as tmp:
            scratch = Path(tmp)
            (scratch / "src").mkdir()
            (scratch / "src" / "lib.rs").write_text("")
            (scratch / "Cargo.toml").write_text(
                f'[package]\nname = "fidelity-fetch"\nversion = "0.0.0"\nedition = "2021"\n\n'
                f'[dependencies]\n{pin["name"]} = "={pin["version"]}"\n'
            )
            _run([cargo, "vendor", "--versioned-dirs", "-q", "vendor"], cwd=scratch)
            lock = (scratch / "Cargo.lock").read_text()
            block = lock.split(f'name = "{pin["name"]}"\nversion = "{pin["version"]}"', 1)
            if len(block) != 2 or f'checksum = "{pin["checksum"]}"' not in block[1].split("[[package]]", 1)[0]:
                raise FetchError(f"the crate {pin['name']} {pin['version']}: checksum does not match pins.json")
            src = scratch / "vendor" / f"{pin['name']}-{pin['version']}"
            if self.crate.exists():
                shutil.rmtree(self.crate)
            shutil.copytree(src, self.crate, symlinks=True)
        (self.crate / ".cargo-checksum.json").unlink()
        shutil.copyfile(HERE / pin["lockfile"], self.crate / "Cargo.lock")
        # `--locked`: the pinned lockfile decides every version, and cargo
        # checks each download against the checksum it records.
        _run([cargo, "vendor", "--locked", "-q", "vendor"], cwd=self.crate)
        (self.crate / ".cargo").mkdir()
        (self.crate / ".cargo" / "config.toml").write_text(CARGO_VENDOR_CONFIG)
        done.write_text("")

    # ---- content -------------------------------------------------------
    def wheel_files(self):
        return [self.wheels / w["file"] for w in PINS["pypi"]["wheels"]]

    def npm_files(self):
        return [self.npm / p["file"] for p in PINS["npm"]]


def _extract(tgz, dest, strip):
    """Extract the regular files and directories under `strip/` of a
    tarball into `dest`, with their modes (less set-id and group/other
    write bits) and timestamps; nothing else (no links, no names that
    climb out). The archives are pinned, but still."""
    dest.mkdir(parents=True)
    stamps = []
    with tarfile.open(tgz, "r:gz") as t:
        for m in t.getmembers():
            head, _, rel = m.name.partition("/")
            parts = rel.split("/")
            if head != strip or not rel or ".." in parts or rel.startswith("/"):
                continue
            target = dest.joinpath(*parts)
            mode = m.mode & 0o755
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif m.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                with t.extractfile(m) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
            else:
                continue
            os.chmod(target, mode | (0o700 if m.isdir() else 0o600))
            stamps.append((target, m.mtime))
    # Directories last-first, after their files are in.
    for target, mtime in reversed(stamps):
        os.utime(target, (mtime, mtime))


class Templates:
    """Workspace templates of one identity, under `work/.templates`."""

    def __init__(self, cache, ident, work, registry):
        self.cache = cache
        self.ident = ident
        self.work = Path(work)
        self.registry = registry
        self.dir = self.work / ".templates"

    def run_path(self, project):
        return self.work / project

    def build(self, projects, log=print):
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in projects:
            log(f"  template {name} ({self.ident.name})")
            at = self.run_path(name)
            if at.exists():
                shutil.rmtree(at)
            getattr(self, "_" + name.replace("-", "_"))(at)
            self.ident.chown(at)
            getattr(self, "_after_" + name.replace("-", "_"), lambda _at: None)(at)
            final = self.dir / name
            if final.exists():
                shutil.rmtree(final)
            at.rename(final)

    def lay(self, project):
        """A fresh copy of the template at the project's run path."""
        at = self.run_path(project)
        if at.exists():
            shutil.rmtree(at)
        subprocess.run(["cp", "-a", str(self.dir / project), str(at)], check=True)
        return at

    # ---- the projects --------------------------------------------------
    def _six(self, at):
        _extract(self.cache.pypi / PINS["pypi"]["sdist"]["file"], at, "six-1.17.0")

    def _six_venv(self, at):
        self._six(at)

    def _six_tool(self, at):
        self._six(at)
        tools = at / "tools"
        tools.mkdir()
        (tools / "cache_state.py").write_text(CACHE_STATE_TOOL)

    def _after_six_venv(self, at):
        py = self.ident.venv / "bin" / "python"
        self.ident.run([str(py), "-m", "venv", str(at / ".venv")], check=True)
        conf = at / ".venv" / "pip.conf"
        conf.write_text(
            f"[global]\nindex-url = {self.registry.url}/simple/\ntrusted-host = {self.registry.host.split(':')[0]}\n"
        )
        self.ident.chown(conf)

    def _six_git(self, at):
        self._six(at)
        (at / "Makefile").write_text(MAKEFILE)
        (at / ".gitignore").write_text("__pycache__/\n.pytest_cache/\n*.pyc\n")

    def _git(self, at, argv, when=None):
        env = dict(self.ident.env)
        if when:
            env.update(GIT_AUTHOR_DATE=when, GIT_COMMITTER_DATE=when)
        self.ident.run(["git", *argv], cwd=at, env=env, check=True)

    def _after_six_git(self, at):
        g = self._git
        g(at, ["init", "-q", "-b", "main"])
        g(at, ["add", "-A"])
        g(at, ["commit", "-q", "-m", "six 1.17.0 from its sdist"], GIT_DATES[0])
        g(at, ["switch", "-q", "-c", "topic"])
        (at / "TOPIC.txt").write_text("work on a topic branch\n")
        g(at, ["add", "TOPIC.txt"])
        g(at, ["commit", "-q", "-m", "topic: start"], GIT_DATES[1])
        g(at, ["switch", "-q", "main"])
        with open(at / "CHANGES", "a") as f:
            f.write("\nUnreleased: a fidelity bench entry.\n")
        g(at, ["commit", "-q", "-am", "CHANGES: unreleased entry"], GIT_DATES[2])
        hook = at / ".git" / "hooks" / "pre-commit"
        hook.write_text(PRE_COMMIT)
        hook.chmod(0o755)
        with open(at / "README.rst", "a") as f:
            f.write("\nAn edit not committed yet.\n")
        self.ident.chown(at)

    def _either(self, at):
        shutil.copytree(self.cache.crate, at, symlinks=True)

    def _line_reporter(self, at):
        _extract(self.cache.npm / PINS["npm"][0]["file"], at, "package")

    def _npm_app(self, at):
        at.mkdir()
        deps = {}
        for pin in PINS["npm"]:
            name, version = pin["spec"].rsplit("@", 1)
            deps[name] = version
        (at / "package.json").write_text(
            json.dumps({"name": "fidelity-app", "version": "1.0.0", "private": True, "dependencies": deps}, indent=2) + "\n"
        )
        (at / ".npmrc").write_text(f"registry={self.registry.url}/\n")

    def _after_npm_app(self, at):
        env = dict(self.ident.env, **self.registry.proxy_env())
        self.ident.run(
            ["npm", "install", "--package-lock-only", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=at, env=env, check=True,
        )
