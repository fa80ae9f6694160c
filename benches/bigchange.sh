#!/usr/bin/env bash
# A big change set end to end (README, Performance): rehearse a command that
# writes a generated "dependency install" (FILES small files spread over
# DIRS package directories under node_modules/, every package with the same
# LICENSE), then promote it, and print the wall time of each step, the run
# record's size and the size of the journal's promotion entry.
#
#   benches/bigchange.sh            (as root; FILES=50000 DIRS=2000 default)
#
# BIN=/path/to/dryrun measures another build (e.g. the commit before).
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${FILES:-50000}
DIRS=${DIRS:-2000}
if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet
    BIN=$PWD/target/release/dryrun
fi
WORK=${BENCH_DIR:-/var/tmp/dryrun-bench-big}
# A previous run's files are deleted after the measurement: on ext4, inodes
# freed moments before are skipped (slowly) when new ones are allocated.
[ -e "$WORK" ] && mv "$WORK" "$WORK.old.$$"
mkdir -p "$WORK/ws" "$WORK/state"
export DRYRUN_STATE_DIR=$WORK/state DRYRUN_LOCAL=1
echo "hello" >"$WORK/ws/README.md"
cat >"$WORK/ws/install.py" <<'PY'
import os, sys
files, dirs = int(sys.argv[1]), int(sys.argv[2])
per = files // dirs
lic = "Permission is hereby granted, free of charge, to any person.\n" * 8
for d in range(dirs):
    pkg = "node_modules/pkg%04d" % d
    os.makedirs(pkg)
    n = per + (1 if d < files - per * dirs else 0)
    for i in range(n):
        if i == 0:
            name, body = "LICENSE", lic
        elif i == 1:
            name, body = "index.js", "module.exports = require('./f002.js'); // pkg%04d\n" % d
        else:
            name, body = "f%03d.js" % i, "module.exports = %d;\n" % (d * 1000 + i)
        with open(os.path.join(pkg, name), "w") as f:
            f.write(body)
PY

now_ms() { date +%s%3N; }
t0=$(now_ms)
set +e
"$BIN" execute --json --workspace "$WORK/ws" --expect-write 'node_modules/**' \
    --timeout 600 --command "python3 install.py $FILES $DIRS" >"$WORK/run.json"
code=$?
set -e
t1=$(now_ms)
run_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$WORK/run.json")
decision=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["verdict"]["decision"])' "$WORK/run.json")
changes=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["rehearsal"]["changes"]))' "$WORK/run.json")
inner=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rehearsal"]["duration_ms"])' "$WORK/run.json")
echo "rehearse: exit $code, decision $decision, $changes changes, $((t1 - t0)) ms wall (command itself ${inner} ms)"
t2=$(now_ms)
set +e
${PROMOTE_WRAP:-} "$BIN" promote "$run_id" >"$WORK/promote.out" 2>&1
pcode=$?
set -e
t3=$(now_ms)
echo "promote: exit $pcode, $((t3 - t2)) ms wall"
[ "$pcode" = 0 ] || tail -5 "$WORK/promote.out"
landed=$(find "$WORK/ws/node_modules" -type f 2>/dev/null | wc -l)
echo "files in the live workspace: $landed of $FILES"
t4=$(now_ms)
"$BIN" show "$run_id" >"$WORK/show.out"
t5=$(now_ms)
echo "show (human output): $((t5 - t4)) ms wall, $(wc -l <"$WORK/show.out") lines"
rec=$(find "$WORK/state" -name 'record.json' -path "*$run_id*" -printf '%s\n' | head -1)
echo "run record: ${rec:-?} bytes"
if [ -f "$WORK/state/journal.jsonl" ]; then
    python3 - "$WORK/state/journal.jsonl" <<'PY'
import sys
lines = open(sys.argv[1], "rb").read().splitlines()
print("journal: %d entries, largest %d bytes" % (len(lines), max(len(l) for l in lines)))
PY
fi
t6=$(now_ms)
"$BIN" journal verify >/dev/null
t7=$(now_ms)
echo "journal verify: $((t7 - t6)) ms wall"
rm -rf "$WORK".old.*
