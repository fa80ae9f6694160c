#!/usr/bin/env python3
"""Two dryrun builds' hooks, alternating: the felt latency of
`dryrun hook claude-code` for one command, build A and build B run in
turns so that the machine's drift falls on both alike, in-process and to
a daemon of each build (docs/agent-integration.md, "Felt latency").

    benches/hook_ab.py BIN_A BIN_B [RUNS] [COMMAND]

Prints the median, fastest and mean wall time of the hook alone (no
host shell around it), in ms, per build and engine.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

if len(sys.argv) < 3:
    sys.exit(__doc__)
bins = {"A": os.path.abspath(sys.argv[1]), "B": os.path.abspath(sys.argv[2])}
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 40
command = sys.argv[4] if len(sys.argv) > 4 else "true"
work = tempfile.mkdtemp(prefix="dryrun-hook-ab.", dir="/var/tmp")
ws = os.path.join(work, "ws")
os.makedirs(os.path.join(ws, "out"))
with open(os.path.join(ws, "README.md"), "w") as f:
    f.write("hello\n")
with open(os.path.join(ws, "dryrun.yaml"), "w") as f:
    f.write('hook:\n  expected_writes: ["out/**"]\n')
event = json.dumps({
    "session_id": "b", "transcript_path": "/tmp/t", "cwd": ws,
    "permission_mode": "default", "hook_event_name": "PreToolUse",
    "tool_name": "Bash", "tool_input": {"command": command, "description": "d"},
    "tool_use_id": "t"}).encode()
daemons = {}
try:
    for k, b in bins.items():
        d = os.path.join(work, f"daemon-{k}")
        os.makedirs(os.path.join(d, "run"))
        sock = os.path.join(d, "run", "dryrun.sock")
        p = subprocess.Popen([b, "daemon", "--socket", sock, "--state-dir",
                              os.path.join(d, "state")], stderr=subprocess.DEVNULL)
        daemons[k] = (p, sock)
    deadline = time.monotonic() + 10
    while not all(os.path.exists(s) for _, s in daemons.values()):
        if time.monotonic() > deadline:
            sys.exit("hook_ab: a daemon did not start")
        time.sleep(0.05)
    for engine in ["in-process", "daemon"]:
        times = {k: [] for k in bins}
        for i in range(runs + 3):
            for k, b in bins.items():
                env = dict(os.environ)
                if engine == "daemon":
                    env["DRYRUN_SOCKET"] = daemons[k][1]
                else:
                    env["DRYRUN_STATE_DIR"] = os.path.join(work, f"state-{k}")
                t0 = time.monotonic()
                p = subprocess.run([b, "hook", "claude-code"], input=event, cwd=ws,
                                   capture_output=True, env=env)
                t = (time.monotonic() - t0) * 1000
                if b'"allow"' not in p.stdout:
                    sys.exit(f"hook_ab: build {k} ({engine}) did not allow: "
                             f"{p.stdout[:300]!r} {p.stderr[:300]!r}")
                if i >= 3:  # warm-up
                    times[k].append(t)
        for k, v in times.items():
            print(f"{engine:10} {k} median {statistics.median(v):6.2f}  "
                  f"fastest {min(v):6.2f}  mean {statistics.mean(v):6.2f}  ({bins[k]})")
finally:
    for p, _ in daemons.values():
        p.terminate()
        p.wait()
    subprocess.run(["rm", "-rf", work])
