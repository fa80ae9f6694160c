#!/usr/bin/env bash
# What shadow stubs cost (README, Performance):
#  1. a whole rehearsal of `true` and of one stubbed `gh pr merge` (hyperfine,
#     median wall time; stubs are installed in every rehearsal);
#  2. the per-call cost of a tool that passes through its stub to the real
#     one (`git --version` goes through /.dryrun/bin/dryrun in stub mode)
#     against calling the real copy directly, 200 calls inside one
#     rehearsal, from the run record's duration_ms;
#  3. with BASELINE=/path/to/an/older/dryrun, the `true` rehearsal of that
#     binary side by side (e.g. one built from the commit before stubs).
# hyperfine ignores exit codes here: a stubbed call needs approval (exit 3).
#
#   benches/stubs.sh            (as root; RUNS=N, default 30)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-30}
command -v hyperfine >/dev/null || {
    [ "$(id -u)" = 0 ] || { echo "missing: hyperfine" >&2; exit 1; }
    apt-get install -y -qq hyperfine >/dev/null
}
cargo build --release --quiet
DRYRUN=$PWD/target/release/dryrun
WORK=${BENCH_DIR:-/var/tmp/dryrun-bench-stubs}
rm -rf "$WORK"; mkdir -p "$WORK/ws" "$WORK/state" "$WORK/state-base"
echo "hello" >"$WORK/ws/README.md"
export DRYRUN_STATE_DIR=$WORK/state

median_ms() { # hyperfine command
    hyperfine -N -i --style none --warmup 3 --runs "$RUNS" --export-json "$WORK/h.json" "$1" >/dev/null 2>&1 || true
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("%.1f" % (r["median"]*1000))' "$WORK/h.json"
}

echo "| rehearsal (median wall ms, $RUNS runs) | figure |"
echo "|---|---:|"
echo "| \`true\` | $(median_ms "$DRYRUN execute --workspace $WORK/ws --command true") |"
echo "| one stubbed \`gh pr merge 1\` | $(median_ms "$DRYRUN execute --workspace $WORK/ws --command 'gh pr merge 1'") |"
if [ -n "${BASELINE:-}" ]; then
    echo "| \`true\`, baseline binary ($BASELINE) | $(DRYRUN_STATE_DIR=$WORK/state-base median_ms "$BASELINE execute --workspace $WORK/ws --command true") |"
fi

# Per-call cost inside the sandbox: the run record's duration_ms is the
# command's own wall time.
inner_ms() { # shell command; median duration_ms over 9 rehearsals
    for _ in 1 2 3 4 5 6 7 8 9; do
        { "$DRYRUN" execute --json --workspace "$WORK/ws" --command "$1" || true; } |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["rehearsal"]["duration_ms"])'
    done | sort -n | sed -n 5p
}
loop() { printf 'for i in $(seq 200); do %s --version >/dev/null; done' "$1"; }
through=$(inner_ms "$(loop git)")
# The real git inside the sandbox: the image as it is without stubs.
direct=$(inner_ms "$(loop "/.dryrun/stubs/real-root$(readlink -f "$(command -v git)")")")
echo
echo "| 200 × \`git --version\` inside one rehearsal (median of 9, ms) | figure |"
echo "|---|---:|"
echo "| through its stub (passthrough to the real git) | $through |"
echo "| the real git directly | $direct |"
python3 -c "import sys; t,d=map(float,sys.argv[1:]); print('| added per call (ms) | %.2f |' % ((t-d)/200))" "$through" "$direct"
