#!/usr/bin/env bash
# Where the daemon's rehearsals spend their CPU, by process role (daemon,
# resident helper, host side, user-namespace child, sandbox init, command,
# evidence reader, kernel workers): benches/daemon.sh under a system-wide
# `perf record -g`, classified by benches/cpu-roles.py.
#
#   benches/cpu-roles.sh              # 8 clients x 60 runs of `true`
#   SECONDS_SAMPLED=5 benches/cpu-roles.sh
#
# As root, with `perf` installed (Debian: linux-perf). The machine should be
# otherwise idle: every process's samples are read.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "perf is missing (Debian: apt-get install linux-perf)" >&2; exit 1; }
SECONDS_SAMPLED=${SECONDS_SAMPLED:-3}
OUT=$(mktemp -d /tmp/dryrun-cpu-roles.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
cargo build --release --quiet
CLIENTS=${CLIENTS:-8} PER_CLIENT=${PER_CLIENT:-60} benches/daemon.sh >"$OUT/daemon.txt" 2>&1 &
BENCH=$!
# The daemon is up and loaded once its clients' runs are under way.
for _ in $(seq 200); do pgrep -f "__sandbox-resident" >/dev/null && break; sleep 0.05; done
sleep 1
perf record -a -g -o "$OUT/perf.data" -- sleep "$SECONDS_SAMPLED" >/dev/null 2>&1
wait "$BENCH" || { cat "$OUT/daemon.txt" >&2; exit 1; }
grep -E "rehearsals/s|CPU per rehearsal" "$OUT/daemon.txt"
perf script -i "$OUT/perf.data" --show-task-events -F pid,tid,comm,event,ip,sym,dso 2>/dev/null >"$OUT/script.txt"
python3 benches/cpu-roles.py "$OUT/script.txt" 5
