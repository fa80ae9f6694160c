#!/usr/bin/env bash
# The whole speed table, side by side in one run: dryrun
# (`execute --local --command true`, as root and as `nobody`) next to the
# lean baseline (benches/lean/lean.c: one process mounting a tmpfs-backed
# overlay over the workspace, running `bwrap --unshare-all ... bash -c CMD`
# in it and walking the upper layer, with no helper processes), the floor
# of the same shape without bubblewrap (`lean unshare`: new user, network
# and mount namespaces, the overlay and the walk), bare `bwrap` and bare
# `unshare -Urnm` rows, and the rsync copy lane, at 1k/10k/100k files:
# medians and ratios to the lean baseline run as the same user; and a
# 10-file edit, dryrun next to the lean baseline. Then the daemon with 8
# concurrent clients (benches/daemon.sh), as root and as an ordinary user
# over their own workspace, next to bare `unshare -Urnm true` run 8-wide.
#
#   benches/speed.sh [SIZES...]      default sizes: 1000 10000 100000
#   RUNS=30 DAEMON_RUNS=50 benches/speed.sh
#
# As root (it runs rows as `nobody`); installs hyperfine, bubblewrap and
# rsync with apt-get when missing, and builds the lean driver with cc.
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
mkdir -p "$WORK"
AS_USER="setpriv --reuid=nobody --regid=nogroup --clear-groups --"
LEAN=$WORK/lean
cc -O2 -o "$LEAN" benches/lean/lean.c
BARE_BWRAP="bwrap --unshare-all --die-with-parent --new-session --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --dev /dev --proc /proc --tmpfs /tmp bash -c true"

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

# What the rows leave behind is moved aside here and deleted at the end:
# on a file system without a journal (this VM's ext4), an inode freed in
# the last 60 s (360 s while its inode table block is dirty) is skipped,
# slowly, by every file creation after it
# (ext4's `recently_deleted`), so deleting a state directory of some
# thousand files, or the rsync lane's copy of 100,000, would slow every
# row measured after it. The rsync lanes (which must delete their copy)
# are measured last, after the daemon.
TRASH_DIR=$WORK/trash
export TRASH_DIR
mkdir -p "$TRASH_DIR"
discard() { [ ! -e "$1" ] || mv "$1" "$TRASH_DIR/$(basename "$1").$RANDOM$RANDOM"; }

for n in "${SIZES[@]}"; do
    ws=$(make_ws "$n")
    # Write back what making the workspace (and the previous size's rsync
    # lane) left dirty first: otherwise the kernel's writeback of 100,000
    # new files runs during the first rows of this size and is charged to
    # whichever command it meets.
    sync
    echo "measuring $n files..." >&2
    # A fresh state directory per size: every column starts with the same
    # number of runs on record (see the README on what a long history costs
    # on a file system without a journal).
    st=$WORK/state-$n
    discard "$st"
    discard "$st-nobody"
    mkdir -p "$st" "$st-nobody"
    chown nobody "$st-nobody"
    measure "dryrun, root" "$n" "$RUNS" "$DRYRUN --state-dir $st execute --local --workspace $ws --command true"
    measure "dryrun, as nobody" "$n" "$RUNS" "$AS_USER $DRYRUN --state-dir $st-nobody execute --local --workspace $ws --command true"
    measure "lean baseline: overlay + bwrap --unshare-all + walk" "$n" "$RUNS" "$LEAN bwrap $ws true"
    measure "lean baseline, as nobody" "$n" "$RUNS" "$AS_USER $LEAN bwrap $ws true"
    # A 10-file edit: the change list, its hashes and the kept content.
    measure "dryrun, root, 10-file edit" "$n" "$RUNS" "$DRYRUN --state-dir $st execute --local --workspace $ws --expect-write d0/** --command '$EDIT'"
    measure "dryrun, as nobody, 10-file edit" "$n" "$RUNS" "$AS_USER $DRYRUN --state-dir $st-nobody execute --local --workspace $ws --expect-write d0/** --command '$EDIT'"
    measure "lean baseline, 10-file edit" "$n" "$RUNS" "$LEAN bwrap $ws '$EDIT'"
    measure "lean baseline, as nobody, 10-file edit" "$n" "$RUNS" "$AS_USER $LEAN bwrap $ws '$EDIT'"
    measure "floor: overlay + unshare user, net, mount + walk" "$n" "$RUNS" "$LEAN unshare $ws true"
    measure "bare bwrap --unshare-all bash -c true (no overlay, no walk)" "$n" "$RUNS" "$BARE_BWRAP"
    measure "bare unshare -Urnm true" "$n" "$RUNS" "unshare -Urnm true"
done

sync
echo "measuring the daemon (8 clients, as root and as nobody)..." >&2
# Each kind DAEMON_REPEATS times, alternating: the median run is shown
# with the range (this VM's figures move by 10-20% between runs).
DAEMON_REPEATS=${DAEMON_REPEATS:-3}
daemon_out=()
daemon_user_out=()
for _ in $(seq "$DAEMON_REPEATS"); do
    daemon_out+=("$(CLIENTS=8 PER_CLIENT=$DAEMON_RUNS benches/daemon.sh 2>&1 || true)")
    # An ordinary user's clients over that user's workspace, as agents on a
    # shared root daemon: the daemon then reads the workspace with the
    # owner's rights (its workspace agents).
    daemon_user_out+=("$(CLIENT_USER=nobody CLIENTS=8 PER_CLIENT=$DAEMON_RUNS benches/daemon.sh 2>&1 || true)")
done
# Bare `unshare -Urnm true`, 8 at a time, as many as the daemon ran.
total=$((8 * DAEMON_RUNS))
sync
t0=$(date +%s.%N)
seq "$total" | xargs -P8 -I{} unshare -Urnm true
t1=$(date +%s.%N)

for n in "${SIZES[@]}"; do
    ws=$(make_ws "$n")
    sync
    echo "measuring the rsync copy lane, $n files..." >&2
    rruns=$((n >= 100000 ? 3 : 10))
    measure "rsync copy lane" "$n" "$rruns" "bash -c 'rm -rf $WORK/copy && rsync -a $ws/ $WORK/copy/ && (cd $WORK/copy && true) && rsync -rcn --out-format=%n $WORK/copy/ $ws/ >/dev/null; rm -rf $WORK/copy'"
done
rm -rf "$TRASH_DIR"

SEP=$'\x1e'
python3 - "$results" "$(IFS=$SEP; echo "${daemon_out[*]}")" "$(IFS=$SEP; echo "${daemon_user_out[*]}")" "$total" "$t0" "$t1" "${SIZES[@]}" <<'PY'
import sys, collections, re
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    label, size, ms = line.rstrip("\n").split("\t")
    rows.setdefault(label, {})[size] = ms
def rate(out):
    m = re.search(r"= ([0-9.]+) rehearsals/s", out)
    return float(m.group(1)) if m else -1.0
def median_run(outs):
    outs = sorted(outs.split("\x1e"), key=rate)
    return outs[len(outs) // 2], [rate(o) for o in outs]
daemons, spread = {}, {}
for who, arg in (("root clients", sys.argv[2]), ("clients as nobody", sys.argv[3])):
    daemons[who], spread[who] = median_run(arg)
total, t0, t1 = int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
sizes = sys.argv[7:]
base = rows.get("lean baseline: overlay + bwrap --unshare-all + walk", {})
edit_base = rows.get("lean baseline, 10-file edit", {})
user_base = rows.get("lean baseline, as nobody", {})
user_edit_base = rows.get("lean baseline, as nobody, 10-file edit", {})
def ratio(v, b):
    try:
        return "%.2f×" % (float(v) / float(b))
    except (ValueError, ZeroDivisionError):
        return "-"
print("| rehearsal of `true`: median ms (× the lean baseline run as the same user) | " + " | ".join(f"{int(s):,} files" for s in sizes) + " |")
print("|---|" + "---:|" * len(sizes))
for label, v in rows.items():
    edit, user = "10-file edit" in label, "nobody" in label
    b = {(False, False): base, (True, False): edit_base, (False, True): user_base, (True, True): user_edit_base}[(edit, user)]
    print(f"| {label} | " + " | ".join(f"{v.get(s, '-')} ({ratio(v.get(s), b.get(s))})" for s in sizes) + " |")
bare = total / (t1 - t0)
found = {}
for who, out in daemons.items():
    found[who] = (
        re.search(r"= ([0-9.]+) rehearsals/s", out),
        re.search(r"CPU per rehearsal \(daemon and its helpers\): ([0-9.]+) ms", out),
        re.search(r"p50 ([0-9.]+)\s+p90 ([0-9.]+)\s+p99 ([0-9.]+)", out),
        re.search(r"idle ([0-9.]+) MiB, peak under load ([0-9.]+) MiB, idle again 3 s later ([0-9.]+) MiB", out),
        re.search(r"machine CPU busy: ([0-9]+)% of [0-9]+ cores, ([0-9.]+) ms per rehearsal", out),
        out,
    )
print()
print("| daemon, 8 concurrent clients, `true` | " + " | ".join(daemons) + " |")
print("|---|" + "---:|" * len(daemons))
def row(label, f):
    print(f"| {label} | " + " | ".join(f(*found[w]) for w in daemons) + " |")
def failed(out):
    return "failed: " + (out.strip().splitlines()[-1] if out.strip() else "?")
row("rehearsals/s (median run)", lambda m, c, l, r, b, out: m.group(1) if m else failed(out))
print("| range over the runs | " + " | ".join("%.1f-%.1f (%d runs)" % (min(spread[w]), max(spread[w]), len(spread[w])) for w in daemons) + " |")
print(f"| bare `unshare -Urnm true` 8-wide, runs/s | " + " | ".join(f"{bare:.0f}" for _ in daemons) + " |")
row("ratio to the bare floor", lambda m, c, l, r, b, out: f"{float(m.group(1)) / bare:.2f}×" if m else "-")
row("CPU per rehearsal, ms", lambda m, c, l, r, b, out: c.group(1) if c else "-")
row("whole machine: CPU busy, CPU per rehearsal", lambda m, c, l, r, b, out: f"{b.group(1)}%, {b.group(2)} ms" if b else "-")
row("latency p50 / p90 / p99 ms", lambda m, c, l, r, b, out: f"{l.group(1)} / {l.group(2)} / {l.group(3)}" if l else "-")
row("RSS idle / peak / idle again, MiB", lambda m, c, l, r, b, out: f"{r.group(1)} / {r.group(2)} / {r.group(3)}" if r else "-")
PY
