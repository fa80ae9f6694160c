"""A typed client for the dryrun daemon: HTTP/1.1 + JSON over its Unix
socket, standard library only.

    from dryrun_client import Client, Envelope, Intent
    c = Client()                                  # DRYRUN_SOCKET or the default socket
    run = c.execute(Envelope(command="make fmt", working_dir="/home/me/proj",
                             intent=Intent(expected_writes=["src/**"])))
    if run.decision == "promote":
        c.promote(run.run_id)

The caller's identity is the socket's peer credentials: the daemon records
who submitted, and only reviewers (another uid) approve.

The rehearsed command's environment is this process's (`os.environ`), sent
as the envelope's `caller_env` and filtered by the daemon (secret-looking
names and values are removed and named in the record); pass
`Client(send_environment=False)` to send none (the daemon then uses the
login environment of the workspace's owner), or set `Envelope.caller_env`.
"""
from __future__ import annotations

import http.client
import json
import os
import socket
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Union

__all__ = [
    "Client", "Envelope", "Intent", "Network", "Live", "Limits", "Run", "Change",
    "DryrunError", "default_socket", "interleave", "PRESETS",
]

# Registry presets an allowlist may name: each stands for the hosts of the
# registry that tool is configured to use for the user the command runs as
# (docs/egress.md).
PRESETS = ("npm", "pypi", "crates", "goproxy")


def default_socket() -> str:
    """DRYRUN_SOCKET, else the user's socket, else the system's."""
    env = os.environ.get("DRYRUN_SOCKET")
    if env:
        return env
    if os.geteuid() != 0 and os.environ.get("XDG_RUNTIME_DIR"):
        user = os.path.join(os.environ["XDG_RUNTIME_DIR"], "dryrun.sock")
        if os.path.exists(user):
            return user
    return "/run/dryrun/dryrun.sock"


class DryrunError(Exception):
    """An error answer: `status` (HTTP), `code` and `message` from the
    daemon's `{"error": {"code", "message"}}` body."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{message} ({code}, HTTP {status})")
        self.status, self.code, self.message = status, code, message


@dataclass
class Limits:
    timeout_s: Optional[int] = None
    memory_mb: Optional[int] = None
    pids: Optional[int] = None
    output_kb: Optional[int] = None
    disk_mb: Optional[int] = None
    cpus: Optional[int] = None


@dataclass
class Network:
    """`intent.network` as an object: `allow`, names the command may reach
    through the run's egress proxy (`host`, `*.suffix`, either with
    `:port`; without one, ports 80 and 443), or registry presets
    (`PRESETS`); `services`, host services forwarded into the sandbox
    (`127.0.0.1:PORT`, `[::1]:PORT`, a Unix socket's path). Everything
    within the system policy (`egress.ceiling`, `egress.services`): the
    daemon refuses an entry beyond it (DryrunError, HTTP 400, naming it)."""
    allow: Optional[List[str]] = None
    services: List[str] = field(default_factory=list)


@dataclass
class Intent:
    summary: str = ""
    mode: str = "mutating"  # or "read_only"
    expected_writes: List[str] = field(default_factory=list)
    forbidden_paths: List[str] = field(default_factory=list)
    reviewer_note: Optional[str] = None
    # "none" (the default), a list of entries (names and presets), or Network.
    network: Union[str, List[str], Network] = "none"
    # A non-zero exit blocks (by default a failure inside the intent is a result).
    require_success: bool = False


@dataclass
class Live:
    """How the live lane carries out a promoted run: `apply` (the reviewed
    change set) or `rerun` (runs again; always needs approval), with
    `network` (`none` or `host`) and `env_from_host` for a rerun."""
    mode: str = "apply"
    network: str = "none"
    env_from_host: List[str] = field(default_factory=list)


@dataclass
class Envelope:
    """The envelope (unknown fields are refused by the daemon, so this
    class has exactly its fields)."""
    command: Optional[str] = None
    working_dir: Optional[str] = None
    steps: Optional[List[str]] = None
    task: Optional[str] = None
    intent: Intent = field(default_factory=Intent)
    limits: Limits = field(default_factory=Limits)
    env: Dict[str, str] = field(default_factory=dict)
    # The client's environment (None: the Client fills it from os.environ,
    # unless told not to).
    caller_env: Optional[Dict[str, str]] = None
    # The client's umask (None: the Client sends this process's, unless
    # told not to send its environment).
    caller_umask: Optional[int] = None
    # Per-run stub overrides by id (the policy's StubConfig shape:
    # {"match": {...}, "answer": {"stdout": ..., "exit": N}, ...}).
    stubs: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    live: Optional[Live] = None

    def to_json(self) -> Dict[str, Any]:
        def clean(v):
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items() if x is not None}
            if isinstance(v, list):
                return [clean(x) for x in v]
            return v
        body = clean(asdict(self))
        net = body["intent"].get("network")
        if isinstance(net, dict):
            body["intent"]["network"] = {k: v for k, v in net.items()
                                         if not (k == "services" and not v)}
        if not body["intent"].get("require_success"):
            body["intent"].pop("require_success", None)
        if not body.get("stubs"):
            body.pop("stubs", None)
        return body


@dataclass
class Change:
    path: str
    kind: str       # created | modified | deleted | metadata | identical
    file_type: str  # file | dir | symlink | other
    before: Optional[str]
    after: Optional[str]


def this_process_umask() -> Optional[int]:
    """This process's umask, read without changing it (os.umask can only
    read it by setting it, which another thread could see)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def interleave(stdout: str, stderr: str, order: Optional[List[Dict[str, Any]]]) -> str:
    """stdout and stderr in the order the command wrote them, from the
    record's `rehearsal.output_order` (chunks of each stream, in turn,
    lengths in UTF-8 bytes). Every byte of both streams appears exactly
    once: a chunk is cut at the end of its stream, and what the order does
    not cover follows it, stdout first; an order that splits a character
    (not one dryrun writes) reads as stdout, then stderr."""
    streams = {"stdout": stdout.encode(), "stderr": stderr.encode()}
    pos = {"stdout": 0, "stderr": 0}
    pieces: List[bytes] = []
    for chunk in order or []:
        s = chunk.get("stream")
        if s not in streams:
            continue
        text, start = streams[s], pos[s]
        end = min(len(text), start + max(0, int(chunk.get("bytes", 0))))
        pieces.append(text[start:end])
        pos[s] = end
    pieces.append(streams["stdout"][pos["stdout"]:])
    pieces.append(streams["stderr"][pos["stderr"]:])
    try:
        return "".join(p.decode() for p in pieces)
    except UnicodeDecodeError:
        return stdout + stderr


@dataclass
class Run:
    """The parts of a `dryrun.run/v1` record an agent acts on; `record`
    keeps the whole thing. `output` is stdout and stderr as a terminal
    showed them (in the order written); `to_change` says what to change so
    the run goes through."""
    run_id: str
    state: str
    decision: Optional[str]
    command: str
    exit_code: Optional[int]
    stdout: str
    stderr: str
    changes: List[Change]
    surprise_paths: List[str]
    forbidden_paths_touched: List[str]
    reasons: List[str]
    risk_level: Optional[str]
    receipt_id: Optional[str]
    record: Dict[str, Any]
    output: str = ""
    signal: Optional[int] = None
    output_truncated: bool = False
    to_change: List[str] = field(default_factory=list)

    @classmethod
    def from_record(cls, r: Dict[str, Any]) -> "Run":
        reh = r.get("rehearsal") or {}
        v = r.get("verdict") or {}
        risk = r.get("risk") or {}
        return cls(
            run_id=r["run_id"], state=r["state"], decision=v.get("decision"),
            command=r.get("command", ""), exit_code=reh.get("exit_code"),
            stdout=reh.get("stdout", ""), stderr=reh.get("stderr", ""),
            changes=[Change(c["path"], c["kind"], c["file_type"], c.get("before"), c.get("after"))
                     for c in reh.get("changes", [])],
            surprise_paths=v.get("surprise_paths", []),
            forbidden_paths_touched=v.get("forbidden_paths_touched", []),
            reasons=v.get("reasons", []), risk_level=risk.get("level"),
            receipt_id=(r.get("receipt") or {}).get("receipt_id"), record=r,
            output=interleave(reh.get("stdout", ""), reh.get("stderr", ""), reh.get("output_order")),
            signal=reh.get("signal"), output_truncated=bool(reh.get("output_truncated", False)),
            to_change=v.get("to_change", []),
        )

    @property
    def needs_approval(self) -> bool:
        """Waiting for a person, and approvable without an override."""
        return self.state == "awaiting_approval" and self.decision != "blocked"

    @property
    def blocked(self) -> bool:
        """Blocked: only a reviewer's explicit override can approve it."""
        return self.decision == "blocked"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("dryrun", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


class Client:
    def __init__(self, socket_path: Optional[str] = None, timeout: float = 600.0,
                 send_environment: bool = True):
        self.socket_path = socket_path or default_socket()
        self.timeout = timeout
        self.send_environment = send_environment

    def _envelope(self, envelope: Envelope) -> Dict[str, Any]:
        body = envelope.to_json()
        if envelope.caller_env is None and self.send_environment:
            body["caller_env"] = dict(os.environ)
        if envelope.caller_umask is None and self.send_environment:
            mask = this_process_umask()
            if mask is not None:
                body["caller_umask"] = mask
        return body

    def _call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        conn = _UnixConnection(self.socket_path, self.timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"content-type": "application/json"} if data is not None else {}
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        if not 200 <= resp.status < 300:
            try:
                err = json.loads(raw)["error"]
                raise DryrunError(resp.status, err["code"], err["message"])
            except (ValueError, KeyError, TypeError):
                raise DryrunError(resp.status, "unknown", raw[:500].decode("utf-8", "replace"))
        return json.loads(raw) if raw else None

    @staticmethod
    def _id(run_id: str) -> str:
        from urllib.parse import quote
        return quote(run_id, safe="")

    def health(self) -> Dict[str, Any]:
        return self._call("GET", "/v1/health")

    def execute(self, envelope: Envelope) -> Run:
        """Submit and wait for the verdict."""
        return Run.from_record(self._call("POST", "/v1/runs?wait=true", self._envelope(envelope)))

    def submit(self, envelope: Envelope) -> str:
        """Submit without waiting; returns the run id."""
        return self._call("POST", "/v1/runs", self._envelope(envelope))["run_id"]

    def run(self, run_id: str) -> Run:
        return Run.from_record(self._call("GET", f"/v1/runs/{self._id(run_id)}"))

    def wait(self, run_id: str, seconds: int = 60) -> Run:
        """The record once the run's state changes (or after `seconds`)."""
        return Run.from_record(
            self._call("GET", f"/v1/runs/{self._id(run_id)}?wait={int(seconds)}"))

    def withdraw(self, run_id: str, note: str = "") -> Run:
        """The submitter takes back its own waiting run (ends rejected)."""
        return Run.from_record(
            self._call("POST", f"/v1/runs/{self._id(run_id)}/withdraw", {"note": note}))

    def cancel(self, run_id: str) -> Run:
        """Cancel a queued or running rehearsal (ends failed)."""
        return Run.from_record(self._call("POST", f"/v1/runs/{self._id(run_id)}/cancel"))

    def runs(self, state: Optional[str] = None) -> List[Run]:
        path = "/v1/runs" + (f"?state={state}" if state else "")
        return [Run.from_record(r) for r in self._call("GET", path)["runs"]]

    def diff(self, run_id: str) -> Dict[str, Any]:
        return self._call("GET", f"/v1/runs/{self._id(run_id)}/diff")

    def promote(self, run_id: str) -> Run:
        """Apply the reviewed change set (decision promote, or approved)."""
        return Run.from_record(self._call("POST", f"/v1/runs/{self._id(run_id)}/promote", {}))

    def approve(self, run_id: str, note: str = "") -> Run:
        """A reviewer's approval (never the submitter's: the daemon refuses)."""
        return Run.from_record(self._call("POST", f"/v1/runs/{self._id(run_id)}/approve", {"note": note}))

    def reject(self, run_id: str, note: str = "") -> Run:
        return Run.from_record(self._call("POST", f"/v1/runs/{self._id(run_id)}/reject", {"note": note}))

    def journal_verify(self) -> Dict[str, Any]:
        return self._call("GET", "/v1/journal/verify")
