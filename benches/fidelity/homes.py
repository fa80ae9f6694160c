"""Who runs the workflows, and the world each of them has at home.

Two identities, as the issue asks: root, and an ordinary user
(`dryrun-test`, the test suite's unprivileged user). Each runs both lanes
with the environment a login shell of theirs would have (the agent host's
environment: what `dryrun` and the direct command both inherit), with its
toolchains where users keep them:

- root: rustup in /root/.rustup and /root/.cargo/bin (the machine's own),
  and a virtual environment made from root's pyenv Python
  (/root/.pyenv/versions/X, `pyenv global`; required), activated (VIRTUAL_ENV, its
  bin/ first on PATH); its global git identity is the one in
  /root/.gitconfig (one is set when there is none).
- the user: its own rustup under /home/dryrun-test (~/.rustup,
  ~/.cargo/bin): a hard-linked copy of root's default toolchain (the same
  bytes, no extra disk; the files stay root-owned and read-only to the user,
  the way a toolchain shared by an administrator looks; a rustup the user
  installed itself would own them), and a virtual environment made from
  Debian's /usr/bin/python3: root's pyenv build cannot serve another user
  (its libpython is found through a RUNPATH inside root's 0700 home, and
  building a Python needs a download that is not a package registry). Its
  global git identity is written to ~/.gitconfig when it has none.

Both venvs get pytest from the pinned wheels, offline. Everything here is
idempotent and only adds what is missing.
"""

import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

USER_NAME = "dryrun-test"
VENV_REL = ".local/share/dryrun-fidelity/venv"
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SetupError(Exception):
    pass


class Identity:
    def __init__(self, name, pw):
        self.name = name
        self.pw = pw
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.home = Path(pw.pw_dir)
        self.venv = self.home / VENV_REL
        self.toolchains = []
        self.env = {}

    # ---- running -------------------------------------------------------
    def argv(self, argv):
        if os.geteuid() == self.uid:
            return list(argv)
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--", *argv]

    def run(self, argv, cwd=None, env=None, timeout=3600, input=None, check=False):
        """Run `argv` as this identity with exactly `env` (default: its
        login environment). Returns (CompletedProcess, seconds)."""
        t0 = time.monotonic()
        p = subprocess.run(
            self.argv(argv),
            cwd=cwd,
            env=self.env if env is None else env,
            input=input,
            capture_output=True,
            timeout=timeout,
        )
        secs = time.monotonic() - t0
        if check and p.returncode != 0:
            raise SetupError(
                f"{self.name}: {' '.join(map(str, argv))} exited {p.returncode}: "
                f"{p.stderr.decode(errors='replace')[-2000:]}"
            )
        return p, secs

    def chown(self, path):
        """Give `path` (a tree the harness made) to this identity; links are
        not followed."""
        if self.uid != 0:
            subprocess.run(["chown", "-R", "-h", f"{self.uid}:{self.gid}", str(path)], check=True)

    def describe(self):
        return f"{self.name} ({self.pw.pw_name}, home {self.home}): " + "; ".join(self.toolchains)


def _login_env(ident, path_dirs, extra):
    env = {
        "HOME": str(ident.home),
        "USER": ident.pw.pw_name,
        "LOGNAME": ident.pw.pw_name,
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        "PATH": ":".join([*map(str, path_dirs), BASE_PATH]),
        "VIRTUAL_ENV": str(ident.venv),
    }
    env.update(extra)
    return env


def _git_identity(ident, fallback_name):
    p, _ = ident.run(["git", "config", "--global", "user.email"])
    if p.returncode == 0 and p.stdout.strip():
        ident.toolchains.append("git identity from ~/.gitconfig")
        return
    ident.run(["git", "config", "--global", "user.name", fallback_name], check=True)
    ident.run(["git", "config", "--global", "user.email", f"{ident.pw.pw_name}@fidelity.invalid"], check=True)
    ident.toolchains.append("git identity written to ~/.gitconfig (it had none)")


def _venv(ident, base_python, wheels):
    py = ident.venv / "bin" / "python"
    probe, _ = ident.run([str(py), "-c", "import pytest; print(pytest.__version__)"]) if py.exists() else (None, 0)
    if probe is None or probe.returncode != 0 or probe.stdout.decode().strip() != "8.3.4":
        if ident.venv.exists():
            shutil.rmtree(ident.venv)
        parent = ident.venv.parent
        made = []
        while not parent.exists():
            made.append(parent)
            parent = parent.parent
        for d in reversed(made):
            d.mkdir()
            os.chown(d, ident.uid, ident.gid)
        ident.run([str(base_python), "-m", "venv", str(ident.venv)], check=True)
        ident.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
             "--find-links", str(wheels), "pytest==8.3.4"],
            check=True,
        )
    ident.toolchains.append(f"venv {ident.venv} from {base_python} (pytest 8.3.4)")


def _root_python():
    pyenv = Path("/root/.pyenv")
    version_file = pyenv / "version"
    if version_file.is_file():
        version = version_file.read_text().split()[0]
        for name in ("python3", "python"):
            p = pyenv / "versions" / version / "bin" / name
            if p.exists():
                return p, f"pyenv {version}"
    raise SetupError(
        "root has no pyenv Python (/root/.pyenv/version and its versions/X/bin/python3): "
        "root's Python in these workflows is pyenv's, as users keep it"
    )


def _default_toolchain():
    settings = Path("/root/.rustup/settings.toml")
    if not settings.is_file():
        raise SetupError("root has no rustup (/root/.rustup/settings.toml): install rustup for root (.ci/run's toolchain)")
    name = None
    for line in settings.read_text().splitlines():
        if line.startswith("default_toolchain"):
            name = line.split("=", 1)[1].strip().strip('"')
    if not name:
        raise SetupError("root's rustup has no default toolchain")
    base = Path("/root/.rustup/toolchains")
    full = next((d.name for d in sorted(base.iterdir()) if d.name == name or d.name.startswith(name + "-")), None)
    if full is None:
        raise SetupError(f"root's default toolchain {name} is not installed under {base}")
    return full, (base / full).resolve()


def _own_dirs(ident, top):
    for d, dirs, _files in os.walk(top):
        os.chown(d, ident.uid, ident.gid)


def _user_rustup(ident):
    name, src = _default_toolchain()
    rustup = ident.home / ".rustup"
    dst = rustup / "toolchains" / name
    if not (dst / "bin" / "cargo").exists():
        (rustup / "toolchains").mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.name + ".partial")
        if tmp.exists():
            shutil.rmtree(tmp)
        how = subprocess.run(["cp", "-al", str(src), str(tmp)], capture_output=True)
        if how.returncode != 0:
            # Another filesystem: a real copy.
            shutil.rmtree(tmp, ignore_errors=True)
            subprocess.run(["cp", "-a", str(src), str(tmp)], check=True)
        tmp.rename(dst)
    settings = rustup / "settings.toml"
    if not settings.exists():
        settings.write_text(f'version = "12"\ndefault_toolchain = "{name}"\nprofile = "default"\n')
        os.chown(settings, ident.uid, ident.gid)
    # Directories are the user's; the toolchain's files stay root's (shared inodes).
    _own_dirs(ident, rustup)
    bin_dir = ident.home / ".cargo" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for entry in sorted(Path("/root/.cargo/bin").iterdir()):
        target = bin_dir / entry.name
        if target.exists() or target.is_symlink():
            continue
        if entry.is_symlink():
            os.symlink(os.readlink(entry), target)
            os.lchown(target, ident.uid, ident.gid)
        else:
            os.link(entry, target)
    _own_dirs(ident, ident.home / ".cargo")
    ident.toolchains.append(f"rustup {name} in ~/.rustup (hard-linked from root's), proxies in ~/.cargo/bin")


def _ensure_home(ident):
    if not ident.home.is_dir():
        ident.home.mkdir(mode=0o750, parents=True)
        os.chown(ident.home, ident.uid, ident.gid)


def make_root(wheels):
    ident = Identity("root", pwd.getpwuid(0))
    py, what = _root_python()
    if not Path("/root/.cargo/bin/cargo").exists():
        raise SetupError("root has no ~/.cargo/bin/cargo: install rustup for root")
    ident.env = _login_env(
        ident,
        [ident.venv / "bin", "/root/.cargo/bin", "/root/.pyenv/shims", "/root/.pyenv/bin"],
        {"PYENV_ROOT": "/root/.pyenv"} if Path("/root/.pyenv").is_dir() else {},
    )
    ident.toolchains.append("rustup in /root/.rustup, /root/.cargo/bin")
    _venv(ident, py, wheels)
    ident.toolchains[-1] += f" [{what}]"
    _git_identity(ident, "dryrun fidelity (root)")
    return ident


def make_user(wheels):
    try:
        pw = pwd.getpwnam(USER_NAME)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/bash", USER_NAME], check=False)
        pw = pwd.getpwnam(USER_NAME)
    ident = Identity("user", pw)
    _ensure_home(ident)
    ident.env = _login_env(ident, [ident.venv / "bin", ident.home / ".cargo" / "bin"], {})
    _user_rustup(ident)
    _venv(ident, Path("/usr/bin/python3"), wheels)
    _git_identity(ident, "Dryrun Test")
    return ident


def make(names, wheels):
    if os.geteuid() != 0:
        raise SetupError("the fidelity harness runs as root (it runs the workflows as root and as the user dryrun-test)")
    makers = {"root": make_root, "user": make_user}
    return [makers[n](wheels) for n in names]
