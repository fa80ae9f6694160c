#!/usr/bin/env bash
# Rehearsal cost versus workspace size, side by side with the lean
# bubblewrap baseline (benches/lean/lean.c) and with an rsync-copy lane. Prints a Markdown table of medians.
#
#   benches/rehearsal.sh [SIZES...]      default sizes: 1000 10000 100000
#
# Needs: hyperfine, bwrap (bubblewrap), rsync, util-linux unshare;
# installs them with apt-get when missing and running as root.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=("${@:-1000 10000 100000}")
# shellcheck disable=SC2206
SIZES=(${SIZES[*]})
RUNS=${RUNS:-30}
# shellcheck source=benches/lib.sh
. benches/lib.sh
install_bench_tools
cargo build --release --quiet
DRYRUN=$PWD/target/release/dryrun
WORK=${BENCH_DIR:-/var/tmp/dryrun-bench}
mkdir -p "$WORK"
export DRYRUN_STATE_DIR=$WORK/state
# The unprivileged rows run as `nobody` with their own state directory.
mkdir -p "$WORK/state-nobody" && chown nobody "$WORK/state-nobody"
AS_USER="setpriv --reuid=nobody --regid=nogroup --clear-groups --"
EDIT='for i in 0 1 2 3 4 5 6 7 8 9; do echo changed >> d0/f$i.txt; done'

LEAN=$WORK/lean
cc -O2 -o "$LEAN" benches/lean/lean.c
bwrap_cmd() { # workspace, shell command (see benches/lean/lean.c)
    local ws=$1; shift
    printf '%q ' "$LEAN" bwrap "$ws" "$*"
}

rsync_cmd() { # copy lane: copy, run, list what changed, throw away
    local ws=$1; shift
    printf '%s' "rm -rf $WORK/copy && rsync -a $ws/ $WORK/copy/ && (cd $WORK/copy && bash -c '$*') && rsync -rcn --out-format=%n $WORK/copy/ $ws/ >/dev/null; rm -rf $WORK/copy"
}

results=$WORK/results.tsv
: >"$results"
measure() { # label size runs command
    local label=$1 size=$2 runs=$3 cmd=$4 json=$WORK/h.json
    hyperfine -N --style none --warmup 3 --runs "$runs" --export-json "$json" "$cmd" >/dev/null 2>&1 ||
        hyperfine --style none --warmup 2 --runs "$runs" --export-json "$json" "$cmd" >/dev/null 2>&1 || {
        echo -e "$label\t$size\tfailed" >>"$results"; return; }
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("%.1f" % (r["median"]*1000))' "$json" |
        sed "s/^/$label\t$size\t/" >>"$results"
}

for n in "${SIZES[@]}"; do
    ws=$(make_ws "$n")
    echo "measuring $n files..." >&2
    measure "dryrun as root (cgroup v1): true" "$n" "$RUNS" "$DRYRUN execute --workspace $ws --command true"
    measure "dryrun as root (cgroup v1): 10-file edit" "$n" "$RUNS" "$DRYRUN execute --workspace $ws --expect-write '**' --command '$EDIT'"
    measure "dryrun as a user: true" "$n" "$RUNS" "$AS_USER $DRYRUN --state-dir $WORK/state-nobody execute --workspace $ws --command true"
    measure "dryrun as a user: 10-file edit" "$n" "$RUNS" "$AS_USER $DRYRUN --state-dir $WORK/state-nobody execute --workspace $ws --expect-write '**' --command '$EDIT'"
    measure "lean bwrap baseline: true" "$n" "$RUNS" "$(bwrap_cmd "$ws" true)"
    measure "lean bwrap baseline: 10-file edit" "$n" "$RUNS" "$(bwrap_cmd "$ws" "$EDIT")"
    rruns=$(( n >= 100000 ? 5 : 10 ))
    measure "rsync copy lane: true" "$n" "$rruns" "bash -c \"$(rsync_cmd "$ws" true)\""
    measure "rsync copy lane: 10-file edit" "$n" "$rruns" "bash -c \"$(rsync_cmd "$ws" "$EDIT")\""
done

python3 - "$results" "${SIZES[@]}" <<'PY'
import sys, collections
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    label, size, ms = line.rstrip("\n").split("\t")
    rows.setdefault(label, {})[size] = ms
sizes = sys.argv[2:]
print("| median wall time (ms) | " + " | ".join(f"{int(s):,} files" for s in sizes) + " |")
print("|---|" + "---:|" * len(sizes))
for label, v in rows.items():
    print(f"| {label} | " + " | ".join(v.get(s, "-") for s in sizes) + " |")
PY
