#!/usr/bin/env bash
# The felt latency of an agent's command through `dryrun hook claude-code`:
# the hook (rehearsal and verdict) plus what the host runs next (the
# rewritten command: a replay of the output for a run that changed nothing,
# a promotion and replay otherwise), next to running the command directly;
# with the engine in the hook's process and with a daemon.
#
#   benches/hook_latency.sh
#   RUNS=40 benches/hook_latency.sh
#   DRYRUN_BIN=/path/to/other/dryrun benches/hook_latency.sh   # another build
#
# Prints a Markdown table of medians in ms: the command run directly (`bash
# -c CMD`), the hook as a host runs it (`bash -c 'dryrun hook claude-code <
# EVENT'`), the rewritten command the host runs after it (`bash -c
# REWRITE`; for a promotion, each run a fresh one: its hook runs in
# hyperfine's --prepare), their sum, the overhead (sum - direct) and the
# ratio (sum / direct); and, with perf, the CPU time of the hook's whole
# process tree (the sandbox's processes included; the daemon's not).
# Wall times on a shared machine swing with its load: compare rows measured
# in one go, and see docs/agent-integration.md for a quiet machine's figures.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-30}
command -v hyperfine >/dev/null || {
    [ "$(id -u)" = 0 ] && apt-get install -y -qq hyperfine >/dev/null || {
        echo "hyperfine is needed" >&2; exit 1; }
}
if [ -n "${DRYRUN_BIN:-}" ]; then
    DRYRUN=$DRYRUN_BIN
else
    cargo build --release --quiet
    DRYRUN=$PWD/target/release/dryrun
fi
WORK=$(mktemp -d /var/tmp/dryrun-hook-bench.XXXXXX)
cleanup() {
    kill "${PID:-}" 2>/dev/null || true
    wait "${PID:-}" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
WS=$WORK/ws
mkdir -p "$WS/src" "$WS/out"
for i in $(seq 1 20); do echo "line $i" >"$WS/src/f$i.txt"; done
echo "hello" >"$WS/README.md"
git -C "$WS" init -q && git -C "$WS" add -A && git -C "$WS" -c user.name=b -c user.email=b@b commit -qm init
# The hook intent: writes under out/ expected.
printf 'hook:\n  expected_writes: ["out/**"]\n' >"$WS/dryrun.yaml"

event() { # command -> the PreToolUse event Claude Code sends, in a file
    python3 - "$WS" "$1" "$2" <<'PY'
import json, sys
ws, cmd, path = sys.argv[1:4]
json.dump({"session_id": "b", "transcript_path": "/tmp/t", "cwd": ws,
           "permission_mode": "default", "hook_event_name": "PreToolUse",
           "tool_name": "Bash", "tool_input": {"command": cmd, "description": "d"},
           "tool_use_id": "t"}, open(path, "w"))
PY
}
# The rewritten command of a hook answer (stdin), or nothing.
REWRITE='import json, sys; a = json.load(sys.stdin)["hookSpecificOutput"]; print(a.get("updatedInput", {}).get("command", "exit 99"))'

median() { # hyperfine JSON -> "median min" ms
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("%.1f %.1f" % (r["median"]*1000, min(r["times"])*1000))' "$1"
}
measure() { # name, shell command, [prepare command] -> median ms
    local json=$WORK/h-$1.json cmd
    cmd=$(printf 'bash -c %q' "$2")
    if [ -n "${3:-}" ]; then
        hyperfine -N --style none --warmup 3 --runs "$RUNS" --export-json "$json" \
            --prepare "$(printf 'bash -c %q' "$3")" "$cmd" >/dev/null
    else
        hyperfine -N --style none --warmup 3 --runs "$RUNS" --export-json "$json" "$cmd" >/dev/null
    fi
    median "$json"
}
cpu() { # command -> CPU ms of its process tree (perf), or -
    command -v perf >/dev/null || { echo -; return; }
    perf stat -x, -e task-clock -r "$RUNS" -- bash -c "$1" 2>&1 >/dev/null |
        awk -F, '/task-clock/ { printf "%.1f", $1 }' || echo -
}

rows=$WORK/rows.tsv
: >"$rows"
bench() { # engine label, command
    local engine=$1 cmd=$2 ev=$WORK/ev.json direct hook rw
    event "$cmd" "$ev"
    local hook_cmd="$DRYRUN hook claude-code < $ev > $WORK/answer.json"
    direct=$(measure direct "cd $WS && { $cmd; } >/dev/null 2>&1")
    hook=$(measure hook "cd $WS && $hook_cmd")
    # A fresh hook answer's rewritten command in rw.sh.
    printf 'cd %q && %s && python3 -c %q < %q > %q\n' "$WS" "$hook_cmd" "$REWRITE" \
        "$WORK/answer.json" "$WORK/rw.sh" >"$WORK/fresh.sh"
    bash "$WORK/fresh.sh"
    # The rewritten command in one shell, as the host runs it (and as the
    # direct run is measured): not a second shell reading a script.
    if grep -q ' promote ' "$WORK/rw.sh"; then
        # Single use: each timed run promotes a fresh rehearsal.
        rw=$(measure rw "cd $WS && { . $WORK/rw.sh; } >/dev/null 2>&1" "bash $WORK/fresh.sh")
        kind=promote
    else
        rw=$(measure rw "cd $WS && { . $WORK/rw.sh; } >/dev/null 2>&1")
        kind=replay
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$engine" "$cmd" "$kind" "$direct" "$hook" "$rw" \
        "$(cpu "cd $WS && $hook_cmd")" >>"$rows"
}

COMMANDS=("true" "ls" "cat README.md" "git status --short" "date +%N > out/stamp")
export DRYRUN_LOCAL=1 DRYRUN_STATE_DIR=$WORK/state
for c in "${COMMANDS[@]}"; do bench in-process "$c"; done
unset DRYRUN_LOCAL DRYRUN_STATE_DIR
mkdir -p "$WORK/run"
"$DRYRUN" daemon --socket "$WORK/run/dryrun.sock" --state-dir "$WORK/dstate" 2>"$WORK/daemon.log" &
PID=$!
for _ in $(seq 100); do [ -S "$WORK/run/dryrun.sock" ] && break; sleep 0.1; done
export DRYRUN_SOCKET=$WORK/run/dryrun.sock
for c in "${COMMANDS[@]}"; do bench daemon "$c"; done

python3 - "$rows" <<'PY'
import sys
print("| engine | command | after the hook | direct | hook | rewrite | hook + rewrite | overhead | ratio | hook CPU |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
for line in open(sys.argv[1]):
    e, c, k, d, h, r, cpu = line.rstrip("\n").split("\t")
    (d, dmin), (h, hmin), (r, rmin) = [tuple(map(float, x.split())) for x in (d, h, r)]
    s, smin = h + r, hmin + rmin
    print(f"| {e} | `{c}` | {k} | {d:.1f} | {h:.1f} ({hmin:.1f}) | {r:.1f} ({rmin:.1f}) "
          f"| {s:.1f} ({smin:.1f}) | {s - d:+.1f} ({smin - dmin:+.1f}) | {s / d:.1f}x | {cpu} |")
print()
print("Medians in ms, the fastest run in parentheses; hook CPU: ms of CPU time of the hook's")
print("process tree per hook (perf task-clock: the sandbox's processes in-process, the client alone")
print("with a daemon).")
PY
