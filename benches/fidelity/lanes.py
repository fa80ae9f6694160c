"""The two lanes of a workflow and the verdict on them.

- direct: `bash -c COMMAND` in a fresh copy of the project, as the
  identity, with its login environment (plus, for a workflow that uses the
  stand-in registry, the stand-in as HTTP proxy: the host has no resolver
  entry for its name; see standin.py).
- dryrun: in another fresh copy at the same path, `dryrun execute --json
  --file ENVELOPE` as the identity with the same environment (the CLI door:
  the door every other door reduces to, and the only one that can declare
  a network allowlist today), then `dryrun promote RUN_ID` when the
  decision is promote.

The envelope: the command, the workspace, intent mutating with every
write expected (`**`), the network the workflow needs, and nothing else:
limits, environment and view are dryrun's defaults, what a user gets.

Results:
- REFUSED: dryrun did not carry the run out: invalid input, a failed
  rehearsal, a decision other than promote (needs approval, blocked), or a
  refused promotion; the reasons are dryrun's.
- DIFFERENT: carried out, but the rehearsal's exit status is not the direct
  run's, or the promoted workspace is not the direct run's (after the
  normalisation of compare.py), or the workflow's own check failed.
- SAME: neither.
"""

import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import compare

SAME, DIFFERENT, REFUSED = "SAME", "DIFFERENT", "REFUSED"


class Context:
    """What the lanes of one identity share."""

    def __init__(self, dryrun, ident, templates, registry, service, scratch, baseline=False):
        self.baseline = baseline
        self.dryrun = str(dryrun)
        self.ident = ident
        self.templates = templates
        self.registry = registry
        self.service = service
        self.scratch = Path(scratch)
        self.state = self.scratch / f"state-{ident.name}"
        self.state.mkdir(exist_ok=True)
        os.chown(self.state, ident.uid, ident.gid)
        os.chmod(self.state, 0o700)
        self.policy_dirs = {}

    def service_policy_dir(self):
        """A system policy directory (root's, 0755, as the engine demands)
        that lists the loopback service as rehearsable and disposable."""
        if "service" not in self.policy_dirs:
            d = Path(tempfile.mkdtemp(prefix="policy-", dir=self.scratch))
            os.chmod(d, 0o755)
            (d / "fidelity-services.yaml").write_text(
                f"egress:\n  services:\n    - {{endpoint: \"{self.service.endpoint}\", disposable: true}}\n"
            )
            os.chmod(d / "fidelity-services.yaml", 0o644)
            self.policy_dirs["service"] = d
        return self.policy_dirs["service"]


def _tail(b, n=600):
    s = b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
    s = s.strip()
    return s if len(s) <= n else "..." + s[-n:]


def direct(ctx, wf):
    at = ctx.templates.lay(wf.project)
    env = dict(ctx.ident.env)
    if wf.network == "registry":
        env.update(ctx.registry.proxy_env())
    p, secs = ctx.ident.run(["bash", "-c", wf.command_for(ctx.service)], cwd=at, env=env)
    m = compare.manifest(at, compare.git_runner(ctx.ident, at))
    return {"exit": p.returncode, "seconds": secs, "manifest": m, "stderr": _tail(p.stderr)}


def _envelope(ctx, wf, at):
    intent = {
        "summary": f"fidelity bench: {wf.name}",
        "mode": "mutating",
        "expected_writes": ["**"],
    }
    if wf.network == "registry":
        intent["network"] = {"allow": [ctx.registry.host]}
    elif wf.network == "service":
        intent["network"] = {"services": [ctx.service.endpoint]}
    return {"command": wf.command_for(ctx.service), "working_dir": str(at), "intent": intent}


def _dryrun(ctx, args, env):
    p, secs = ctx.ident.run([ctx.dryrun, *args], env=env, timeout=3600)
    try:
        rec = json.loads(p.stdout.decode() or "null")
    except ValueError:
        rec = None
    return p, secs, rec


def _reasons(rec, p):
    if isinstance(rec, dict) and "error" in rec:
        e = rec["error"]
        return [f"{e.get('code')}: {e.get('message')}"]
    if isinstance(rec, dict) and rec.get("verdict"):
        return list(rec["verdict"].get("reasons") or [])
    if isinstance(rec, dict) and rec.get("error"):
        return [str(rec["error"])]
    return [_tail(p.stderr) or f"dryrun exited {p.returncode} with no record"]


def rehearse_and_promote(ctx, wf):
    at = ctx.templates.lay(wf.project)
    env = dict(ctx.ident.env)
    extra = []
    if wf.network == "registry":
        extra = ["--egress-resolve", ctx.registry.pin()]
    elif wf.network == "service":
        env["DRYRUN_SYSTEM_POLICY_DIR"] = str(ctx.service_policy_dir())
    fd, envelope = tempfile.mkstemp(prefix=f"{wf.name}-", suffix=".json", dir=ctx.state)
    with os.fdopen(fd, "w") as f:
        json.dump(_envelope(ctx, wf, at), f)
    os.chown(envelope, ctx.ident.uid, ctx.ident.gid)
    common = ["--local", "--state-dir", str(ctx.state), "--json"]
    p, secs, rec = _dryrun(ctx, ["execute", *common, "--file", envelope, *extra], env)
    out = {"seconds": secs, "dryrun_exit": p.returncode, "record": rec}
    reh = (rec or {}).get("rehearsal") if isinstance(rec, dict) else None
    out["exit"] = reh.get("exit_code") if reh else None
    out["stderr"] = _tail(reh.get("stderr")) if reh else _tail(p.stderr)
    decision = ((rec or {}).get("verdict") or {}).get("decision") if isinstance(rec, dict) else None
    out["decision"] = decision
    if p.returncode != 0 or decision != "promote":
        out["refused"] = [f"dryrun execute exited {p.returncode}, decision {decision or 'none'}"] + _reasons(rec, p)
        return out
    run_id = rec["run_id"]
    out["run_id"] = run_id
    q, psecs, prec = _dryrun(ctx, ["promote", *common, run_id], env)
    out["seconds"] += psecs
    if q.returncode != 0:
        out["refused"] = [f"dryrun promote exited {q.returncode}"] + _reasons(prec, q)
        return out
    out["manifest"] = compare.manifest(at, compare.git_runner(ctx.ident, at))
    return out


def _outside_writes_name(rec, needle):
    ow = ((rec or {}).get("rehearsal") or {}).get("outside_writes")
    if ow is None:
        return False, "the record has no rehearsal.outside_writes"
    # The record summarises by directory: an entry's path and the names
    # written beneath it (examples) together name the file's place.
    named = [e.get("path", "") for e in ow] + [
        f"{e.get('path', '')}/{x}" for e in ow for x in e.get("examples") or []
    ]
    if any(needle in n for n in named):
        return True, ""
    return False, f"rehearsal.outside_writes does not name {needle}: {json.dumps(ow)[:300]}"


def judge(wf, d, r):
    """The result of one workflow: (result, reasons)."""
    if "refused" in r:
        reasons = list(r["refused"])
        if r.get("exit") not in (None, 0):
            reasons.append(
                f"the rehearsal exited {r['exit']} (the direct run {d['exit']}); its stderr: {r['stderr'] or '(empty)'}"
            )
        return REFUSED, reasons
    reasons = []
    if d["exit"] != r["exit"]:
        reasons.append(f"exit status: direct {d['exit']}, rehearsal {r['exit']}; rehearsal stderr: {r['stderr'] or '(empty)'}")
    reasons += [f"tree: {line}" for line in compare.diff(d["manifest"], r["manifest"])]
    if wf.check == "cache" and r["record"] is not None:
        ok, why = _outside_writes_name(r["record"], ".cache/dryrun-fidelity")
        if not ok:
            reasons.append(f"the write to ~/.cache/dryrun-fidelity/state.json is not named: {why}")
    return (DIFFERENT if reasons else SAME), reasons


def run_workflow(ctx, wf, log=print):
    t0 = time.monotonic()
    d = direct(ctx, wf)
    cleanup_outside(ctx, wf)
    # The baseline: the direct lane twice, to see the comparison's own
    # noise floor (every workflow must be SAME against itself).
    r = dict(direct(ctx, wf), record=None) if ctx.baseline else rehearse_and_promote(ctx, wf)
    result, reasons = judge(wf, d, r)
    cleanup_outside(ctx, wf)
    rec = r.get("record") if isinstance(r.get("record"), dict) else {}
    log(f"  {ctx.ident.name}: {wf.name}: {result} ({time.monotonic() - t0:.1f} s in all)")
    return {
        "workflow": wf.name,
        "project": wf.project,
        "identity": ctx.ident.name,
        "result": result,
        "reasons": reasons,
        "direct_exit": d["exit"],
        "rehearsal_exit": r.get("exit"),
        "decision": r.get("decision"),
        "run_id": r.get("run_id") or rec.get("run_id"),
        "direct_s": round(d["seconds"], 3),
        "dryrun_s": round(r["seconds"], 3),
        "ratio": round(r["seconds"] / d["seconds"], 2) if d["seconds"] > 0 else None,
        "stripped": ((rec.get("rehearsal") or {}).get("stripped") or [])[:40],
        "egress": (rec.get("rehearsal") or {}).get("egress") or [],
    }


def repeated(ctx, wf, n, log=print):
    """`run_workflow` n times: the first result, with the median times; a
    result that changed between repetitions is named in its reasons."""
    runs = [run_workflow(ctx, wf, log) for _ in range(max(1, n))]
    first = dict(runs[0])
    if n > 1:
        first["direct_s"] = round(statistics.median(r["direct_s"] for r in runs), 3)
        first["dryrun_s"] = round(statistics.median(r["dryrun_s"] for r in runs), 3)
        first["ratio"] = round(first["dryrun_s"] / first["direct_s"], 2) if first["direct_s"] > 0 else None
        first["repeat"] = n
        seen = sorted({r["result"] for r in runs})
        if len(seen) > 1:
            first["reasons"] = first["reasons"] + [f"unstable: the {n} repetitions gave {', '.join(seen)}"]
    return first


def cleanup_outside(ctx, wf):
    """What a direct run wrote in the real home that the next run must not
    see (the bench's own cache entry)."""
    if wf.check == "cache":
        shutil.rmtree(ctx.ident.home / ".cache" / "dryrun-fidelity", ignore_errors=True)

