#!/usr/bin/env bash
# The whole speed table, side by side in one run: dryrun
# (`execute --local --command true`, as root and as `nobody`), bubblewrap
# over a user-namespace overlay (benches/bwrap-overlay.sh), the bare kernel
# floor (`unshare -Urnm` + overlay + walk, benches/unshare-overlay.sh) and
# the rsync copy lane, at 1k/10k/100k files: medians and ratios to
# bubblewrap; and a 10-file edit, dryrun next to bubblewrap. Then the daemon with 8 concurrent clients (benches/daemon.sh)
# next to bare `unshare -Urnm true` run 8-wide.
#
#   benches/speed.sh [SIZES...]      default sizes: 1000 10000 100000
#   RUNS=30 DAEMON_RUNS=50 benches/speed.sh
#
# As root (it runs rows as `nobody`); installs hyperfine, bubblewrap and
# rsync with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=("${@:-1000 10000 100000}")
# shellcheck disable=SC2206
SIZES=(${SIZES[*]})
RUNS=${RUNS:-30}
DAEMON_RUNS=${DAEMON_RUNS:-50}
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
# shellcheck source=benches/lib.sh
. benches/lib.sh
install_bench_tools
cargo build --release --quiet
DRYRUN=$PWD/target/release/dryrun
WORK=${BENCH_DIR:-/var/tmp/dryrun-bench}
AS_USER="setpriv --reuid=nobody --regid=nogroup --clear-groups --"

EDIT='for i in 0 1 2 3 4 5 6 7 8 9; do echo edit >> d0/f$i.txt; done'
results=$WORK/speed.tsv
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
    # A fresh state directory per size: every column starts with the same
    # number of runs on record (see the README on what a long history costs
    # on a file system without a journal).
    st=$WORK/state-$n
    rm -rf "$st" "$st-nobody"
    mkdir -p "$st" "$st-nobody"
    chown nobody "$st-nobody"
    measure "dryrun, root" "$n" "$RUNS" "$DRYRUN --state-dir $st execute --local --workspace $ws --command true"
    measure "dryrun, as nobody" "$n" "$RUNS" "$AS_USER $DRYRUN --state-dir $st-nobody execute --local --workspace $ws --command true"
    measure "bubblewrap --unshare-all over an overlay + walk" "$n" "$RUNS" "$PWD/benches/bwrap-overlay.sh $ws true"
    # A 10-file edit: the change list, its hashes and the kept content.
    measure "dryrun, root, 10-file edit" "$n" "$RUNS" "$DRYRUN --state-dir $st execute --local --workspace $ws --expect-write d0/** --command '$EDIT'"
    measure "dryrun, as nobody, 10-file edit" "$n" "$RUNS" "$AS_USER $DRYRUN --state-dir $st-nobody execute --local --workspace $ws --expect-write d0/** --command '$EDIT'"
    measure "bubblewrap, 10-file edit" "$n" "$RUNS" "$PWD/benches/bwrap-overlay.sh $ws '$EDIT'"
    measure "unshare -Urnm + overlay + walk (floor)" "$n" "$RUNS" "$PWD/benches/unshare-overlay.sh $ws true"
    rruns=$((n >= 100000 ? 3 : 10))
    measure "rsync copy lane" "$n" "$rruns" "bash -c 'rm -rf $WORK/copy && rsync -a $ws/ $WORK/copy/ && (cd $WORK/copy && true) && rsync -rcn --out-format=%n $WORK/copy/ $ws/ >/dev/null; rm -rf $WORK/copy'"
done

echo "measuring the daemon (8 clients)..." >&2
daemon_out=$(CLIENTS=8 PER_CLIENT=$DAEMON_RUNS benches/daemon.sh 2>&1 || true)
# Bare `unshare -Urnm true`, 8 at a time, as many as the daemon ran.
total=$((8 * DAEMON_RUNS))
t0=$(date +%s.%N)
seq "$total" | xargs -P8 -I{} unshare -Urnm true
t1=$(date +%s.%N)

python3 - "$results" "$daemon_out" "$total" "$t0" "$t1" "${SIZES[@]}" <<'PY'
import sys, collections, re
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    label, size, ms = line.rstrip("\n").split("\t")
    rows.setdefault(label, {})[size] = ms
daemon, total, t0, t1 = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
sizes = sys.argv[6:]
base = rows.get("bubblewrap --unshare-all over an overlay + walk", {})
edit_base = rows.get("bubblewrap, 10-file edit", {})
def ratio(v, b):
    try:
        return "%.2f×" % (float(v) / float(b))
    except (ValueError, ZeroDivisionError):
        return "-"
print("| rehearsal of `true`: median ms (× bubblewrap) | " + " | ".join(f"{int(s):,} files" for s in sizes) + " |")
print("|---|" + "---:|" * len(sizes))
for label, v in rows.items():
    b = edit_base if "10-file edit" in label else base
    print(f"| {label} | " + " | ".join(f"{v.get(s, '-')} ({ratio(v.get(s), b.get(s))})" for s in sizes) + " |")
bare = total / (t1 - t0)
m = re.search(r"= ([0-9.]+) rehearsals/s", daemon)
lat = re.search(r"p50 ([0-9.]+)\s+p90 ([0-9.]+)\s+p99 ([0-9.]+)", daemon)
rss = re.search(r"idle ([0-9.]+) MiB, peak under load ([0-9.]+) MiB, idle again 3 s later ([0-9.]+) MiB", daemon)
print()
print("| daemon, 8 concurrent clients, `true` | figure |")
print("|---|---:|")
if m:
    print(f"| rehearsals/s | {m.group(1)} |")
    print(f"| bare `unshare -Urnm true` 8-wide, runs/s | {bare:.0f} |")
    print(f"| ratio to the bare floor | {float(m.group(1)) / bare:.2f}× |")
else:
    print(f"| daemon bench failed | {daemon.strip().splitlines()[-1] if daemon.strip() else '?'} |")
if lat:
    print(f"| latency p50 / p90 / p99 ms | {lat.group(1)} / {lat.group(2)} / {lat.group(3)} |")
if rss:
    print(f"| RSS idle / peak / idle again, MiB | {rss.group(1)} / {rss.group(2)} / {rss.group(3)} |")
PY
