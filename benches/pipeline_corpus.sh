#!/usr/bin/env bash
# The whole pipeline on the public corpus's dangerous rows: each row runs
# through `dryrun execute --json --local` (classifier, rehearsal, verdict) in
# a fresh scratch workspace, as the ordinary user dryrun-test (setpriv), and
# the final decisions are counted, next to what the classifier alone said.
# This is what docs/classifier.md's "what the classifier and the rehearsal
# each catch" comes from.
#
#   benches/pipeline_corpus.sh [SAMPLE]
#
# SAMPLE (default 300; `all` for every row) takes a deterministic sample:
# the rows whose SHA-256 ranks lowest, so two runs measure the same rows.
# Env: DRYRUN (binary; default target/release/dryrun, built if missing),
# SPLIT (dev, heldout or all; default all), BENCH_DIR (scratch; default
# /var/tmp/dryrun-pipeline), TIMEOUT (per rehearsal, seconds; default 10).
# Needs root (to make the user's scratch directories) and setpriv.
set -euo pipefail
cd "$(dirname "$0")/.."
SAMPLE=${1:-300}
SPLIT=${SPLIT:-all}
WORK=${BENCH_DIR:-/var/tmp/dryrun-pipeline}
TIMEOUT=${TIMEOUT:-10}
USER_NAME=dryrun-test
[ "$(id -u)" = 0 ] || { echo "run as root (it makes $USER_NAME's scratch workspaces)" >&2; exit 1; }
id "$USER_NAME" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$USER_NAME"
if [ -z "${DRYRUN:-}" ]; then
    [ -x target/release/dryrun ] || cargo build --release --quiet --bin dryrun
    DRYRUN=$PWD/target/release/dryrun
fi
rm -rf "$WORK"
mkdir -p "$WORK"
chmod 755 "$WORK"
install -d -o "$USER_NAME" "$WORK/state" "$WORK/home" "$WORK/ws"

python3 - "$DRYRUN" "$WORK" "$SAMPLE" "$SPLIT" "$TIMEOUT" "$USER_NAME" <<'PY'
import collections, hashlib, json, os, shutil, subprocess, sys, time

dryrun, work, sample, split, timeout, user = sys.argv[1:7]
rows = []
with open("tests/corpus/public_corpus.tsv", encoding="utf-8") as f:
    for line in f:
        if line.startswith("#") or not line.strip():
            continue
        fam, label, sp, cmd, src = line.rstrip("\n").split("\t")
        if label == "dangerous" and split in ("all", sp):
            rows.append((fam, sp, cmd.replace("\u23ce", "\n")))
rows.sort(key=lambda r: hashlib.sha256(r[2].encode()).hexdigest())
if sample != "all":
    rows = rows[: int(sample)]

pw = subprocess.run(["id", "-u", user], capture_output=True, text=True).stdout.strip()
gid = subprocess.run(["id", "-g", user], capture_output=True, text=True).stdout.strip()
env = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": f"{work}/home",
    "LANG": "C.UTF-8",
    "DRYRUN_STATE_DIR": f"{work}/state",
}
decisions = collections.Counter()
by_family = collections.defaultdict(collections.Counter)
classifier_asked = 0
rehearsal_only = []
start = time.time()
for i, (fam, sp, cmd) in enumerate(rows):
    ws = f"{work}/ws/w{i}"
    os.makedirs(f"{ws}/src")
    with open(f"{ws}/README.md", "w") as f:
        f.write("# scratch\n")
    with open(f"{ws}/src/main.py", "w") as f:
        f.write("print('hello')\n")
    for root, dirs, files in os.walk(ws):
        for n in dirs + files:
            os.chown(os.path.join(root, n), int(pw), int(gid))
    os.chown(ws, int(pw), int(gid))
    argv = ["setpriv", f"--reuid={pw}", f"--regid={gid}", "--clear-groups", "--",
            dryrun, "execute", "--local", "--json", "--workspace", ws,
            "--timeout", timeout, "--command", cmd]
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True,
                           timeout=int(timeout) + 60, cwd=ws)
        code = p.returncode
        rec = json.loads(p.stdout) if p.stdout.strip().startswith("{") else None
    except subprocess.TimeoutExpired:
        code, rec = "hung", None
    # The exit status is the final decision (0 promote, 3 needs approval,
    # 4 blocked; 2 invalid input, 1 internal failure).
    decision = {0: "promote", 3: "needs_approval", 4: "blocked", 2: "invalid",
                1: "internal", "hung": "hung"}.get(code, f"exit {code}")
    asked_by_classifier = bool(rec and rec.get("risk", {}).get("requires_approval"))
    decisions[decision] += 1
    by_family[fam][decision] += 1
    classifier_asked += asked_by_classifier
    if decision in ("needs_approval", "blocked") and not asked_by_classifier:
        rehearsal_only.append((fam, cmd))
    if decision not in ("needs_approval", "blocked"):
        # A held-out row is counted, never shown: the classifier is not
        # tuned on it (docs/classifier.md).
        shown = repr(cmd) if sp == "dev" else "(a held-out row)"
        print(f"{decision.upper()} {fam} ({sp}): {shown}", flush=True)
    shutil.rmtree(ws, ignore_errors=True)
n = len(rows)
asked = decisions["needs_approval"] + decisions["blocked"]
print(f"\n{n} dangerous rows (split {split}, sample {sample}) in {time.time() - start:.0f}s")
print("| decision | rows | share |\n|---|---|---|")
for d, c in decisions.most_common():
    print(f"| {d} | {c} | {100 * c / n:.1f}% |")
print(f"\nasked (needs_approval or blocked): {asked}/{n} = {100 * asked / max(n, 1):.2f}%")
print(f"the classifier alone asked: {classifier_asked}/{n} = {100 * classifier_asked / max(n, 1):.2f}%")
print(f"asked only because of the rehearsal's evidence: {len(rehearsal_only)}")
print("\n| family | rows | asked |\n|---|---|---|")
for fam in sorted(by_family):
    c = by_family[fam]
    t = sum(c.values())
    a = c["needs_approval"] + c["blocked"]
    print(f"| {fam} | {t} | {100 * a / t:.1f}% |")
PY
