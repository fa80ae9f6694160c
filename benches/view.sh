#!/usr/bin/env bash
# What the view costs (docs/sandbox-view.md): `dryrun execute --local
# --command true`, this build against BASELINE (a build from before the
# view), invocations alternating between the two so that the machine's
# drift (other work, caches) falls on both alike; median and mean wall
# time of RUNS invocations each, as root (the view shows root's home) and
# as an ordinary user (AS_USER, default `nobody`, whose home does not
# exist: /tmp and /var/tmp layers only).
#
#   BASELINE=/path/to/old/dryrun benches/view.sh        (as root; RUNS=N, default 200)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-200}
: "${BASELINE:?set BASELINE to a dryrun binary built from before the view}"
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
cargo build --release --quiet
WORK=${BENCH_DIR:-/var/tmp/dryrun-bench-view}
rm -rf "$WORK"; mkdir -p "$WORK/ws" "$WORK/user-ws"
# Both binaries run from fresh copies: how a file came into the page cache
# changes what faulting in its code costs (the linker's output in target/
# cost about 1.5 ms more CPU per run here than a copy of the same file),
# and an installed binary is a copy.
# Each in a directory of its own, as installed: this build's stub program
# (dryrun-stub) beside it, and the baseline's when it had one.
mkdir -p "$WORK/before" "$WORK/after"
cp "$BASELINE" "$WORK/before/dryrun"
[ ! -x "$(dirname "$BASELINE")/dryrun-stub" ] || cp "$(dirname "$BASELINE")/dryrun-stub" "$WORK/before/"
cp target/release/dryrun target/release/dryrun-stub "$WORK/after/"
chmod 0755 "$WORK/before" "$WORK/after"
BASELINE=$WORK/before/dryrun
DRYRUN=$WORK/after/dryrun
echo hello >"$WORK/ws/README.md"
echo hello >"$WORK/user-ws/README.md"
USER_NAME=${AS_USER:-nobody}
chown -R "$USER_NAME" "$WORK/user-ws"
python3 - "$RUNS" "$BASELINE" "$DRYRUN" "$WORK" "$USER_NAME" "$(id -g "$USER_NAME")" <<'PY'
import os, statistics, subprocess, sys, time
runs, before, after, work, user, gid = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
def cmd(binary, state, ws, as_user):
    c = [binary, "--state-dir", state, "execute", "--local", "--workspace", ws, "--command", "true"]
    return (["setpriv", f"--reuid={user}", f"--regid={gid}", "--clear-groups", "--"] + c) if as_user else c
rows = []
for label, ws, as_user in [("root", f"{work}/ws", False), (f"user ({user})", f"{work}/user-ws", True)]:
    times = {"before": [], "after": []}
    states = {}
    for name in times:
        st = f"{work}/state-{name}-{'u' if as_user else 'r'}"
        os.makedirs(st, exist_ok=True)
        if as_user:
            subprocess.run(["chown", user, st], check=True)
        states[name] = st
    binaries = {"before": before, "after": after}
    for i in range(runs + 5):
        for name in (("before", "after") if i % 2 == 0 else ("after", "before")):
            c = cmd(binaries[name], states[name], ws, as_user)
            t = time.perf_counter()
            r = subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            dt = (time.perf_counter() - t) * 1000
            if r.returncode != 0:
                sys.exit(f"{name} {label}: exit {r.returncode}: {' '.join(c)}")
            if i >= 5:  # warm-up
                times[name].append(dt)
    b, a = times["before"], times["after"]
    rows.append((label, statistics.median(b), statistics.median(a), statistics.mean(b), statistics.mean(a)))
print(f"| `execute --command true`, {runs} runs each, alternating | before (median / mean ms) | after (median / mean ms) | median difference (ms) |")
print("|---|---:|---:|---:|")
for label, mb, ma, eb, ea in rows:
    print(f"| {label} | {mb:.1f} / {eb:.1f} | {ma:.1f} / {ea:.1f} | {ma - mb:+.1f} |")
PY
