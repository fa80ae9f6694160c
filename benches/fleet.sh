#!/usr/bin/env bash
# A fleet simulated on this machine (docs/fleet.md, "Measured"): HOSTS
# daemons, each a separate host in a network namespace of its own that
# reaches a private PostgreSQL cluster over a veth pair, with CLIENTS
# clients each; reports
#   - rehearsals/s of the whole fleet without and with the fleet store
#     (rounds alternate; the store's cost per run),
#   - time from a run waiting on its host (its verdict, the host's clock)
#     to the fleet showing it waiting (`review --fleet` reads that row),
#     p50/p99,
#   - time from a reviewer's decision (the store's clock) to its host
#     applying it (its journal record), p50/p99,
#   - rows and bytes the store keeps per run.
#
#   benches/fleet.sh                      # 3 hosts x 2 clients x 40 runs, 2 rounds
#   HOSTS=4 CLIENTS=2 PER_CLIENT=60 ROUNDS=3 WAITING=30 benches/fleet.sh
#   DRYRUN_BIN=target/debug/dryrun benches/fleet.sh
#   PROFILE=1 benches/fleet.sh            # also: the fleet code's share of each host's CPU
#
# PROFILE=1 first runs one more fleet round (not counted in the means)
# with the daemons under `perf record` (DWARF call graphs, CLOCK_MONOTONIC)
# and reports, per host, the share of the samples taken while the load ran
# (the daemon, its helpers and the sandboxes, kernel included) whose call
# stack passes through the fleet's code or its PostgreSQL client: what the
# store costs the host itself, without the noise of a machine whose cores
# the store's server shares. An alone round is profiled the same way, so
# that samples per rehearsal compare (PROFILE_KEEP=DIR keeps the data).
#
# Root only (namespaces, veths, cgroups). Everything it makes (namespaces
# drfb*, veths, the cluster, the daemons) is removed on exit. Addresses:
# 10.203.N.0/30 on the veths it creates, nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=${HOSTS:-3}
CLIENTS=${CLIENTS:-2}
PER_CLIENT=${PER_CLIENT:-40}
ROUNDS=${ROUNDS:-2}
WAITING=${WAITING:-20}
PROFILE=${PROFILE:-0}
[ "$(id -u)" = 0 ] || { echo "benches/fleet.sh needs root (network namespaces, veths)" >&2; exit 1; }
if [ "$PROFILE" = 1 ]; then
    command -v perf >/dev/null || { echo "PROFILE=1 needs perf (linux-perf)" >&2; exit 1; }
fi
if [ -n "${DRYRUN_BIN:-}" ]; then
    DRYRUN=$(realpath "$DRYRUN_BIN")
else
    cargo build --release --quiet
    DRYRUN=$PWD/target/release/dryrun
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$PGBIN/initdb" ] || { echo "install postgresql (Debian's package)" >&2; exit 1; }
WORK=$(mktemp -d /var/tmp/dryrun-fleet-bench.XXXXXX)
chmod 755 "$WORK"
PORT=$((20000 + RANDOM % 20000))
PIDS=()
stop_daemons() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
    PIDS=()
}
cleanup() {
    stop_daemons
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/pg/data" -m immediate -w stop >/dev/null 2>&1 || true
    for i in $(seq "$HOSTS"); do
        ip netns del "drfb$i" 2>/dev/null || true
        ip link del "drfb$i-r" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

# The hosts' namespaces and veths.
LISTEN=127.0.0.1
for i in $(seq "$HOSTS"); do
    ip netns add "drfb$i"
    ip link add "drfb$i-r" type veth peer name "drfb$i-h"
    ip link set "drfb$i-h" netns "drfb$i"
    ip addr add "10.203.$i.1/30" dev "drfb$i-r"
    ip link set "drfb$i-r" up
    ip netns exec "drfb$i" ip addr add "10.203.$i.2/30" dev "drfb$i-h"
    ip netns exec "drfb$i" ip link set "drfb$i-h" up
    ip netns exec "drfb$i" ip link set lo up
    LISTEN="$LISTEN,10.203.$i.1"
done

# The cluster: as the postgres account, on its own port and socket.
mkdir -p "$WORK/pg"
chown postgres: "$WORK/pg"
echo owner-secret > "$WORK/pg/pw"
chown postgres: "$WORK/pg/pw"
runuser -u postgres -- "$PGBIN/initdb" -D "$WORK/pg/data" -U dryrun_owner --auth-local=trust \
    --auth-host=scram-sha-256 --pwfile="$WORK/pg/pw" -E UTF8 --locale=C >/dev/null
echo "host all all 0.0.0.0/0 scram-sha-256" >> "$WORK/pg/data/pg_hba.conf"
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/pg/data" -l "$WORK/pg/log" -w \
    -o "-p $PORT -k $WORK/pg -c listen_addresses=$LISTEN -c max_connections=200" start >/dev/null
psql_owner() { psql -h "$WORK/pg" -p "$PORT" -U dryrun_owner -d "${DB:-dryrun}" -v ON_ERROR_STOP=1 -tAq -c "$1"; }
DB=postgres psql_owner "CREATE DATABASE dryrun"
OWNER_URL="postgresql://dryrun_owner:owner-secret@127.0.0.1:$PORT/dryrun"
"$DRYRUN" fleet --fleet "$OWNER_URL" migrate >/dev/null
psql_owner "CREATE ROLE bob LOGIN PASSWORD 'pw-bob' IN ROLE dryrun_reviewer"
psql_owner "CREATE ROLE admin LOGIN PASSWORD 'pw-admin' IN ROLE dryrun_admin"
echo 'rules: []' > "$WORK/policy.yaml"
"$DRYRUN" fleet --fleet "postgresql://admin:pw-admin@127.0.0.1:$PORT/dryrun" policy publish "$WORK/policy.yaml" >/dev/null
for i in $(seq "$HOSTS"); do
    psql_owner "CREATE ROLE host$i LOGIN PASSWORD 'pw-host$i' IN ROLE dryrun_host"
    mkdir -p "$WORK/h$i/ws"
    echo hello > "$WORK/h$i/ws/README.md"
    echo "pw-host$i" > "$WORK/h$i/password"
    chmod 600 "$WORK/h$i/password"
    printf 'password_file: %s\npeople:\n  bob: {roles: [bob]}\n' "$WORK/h$i/password" > "$WORK/h$i/fleet.yaml"
done

# FLEET=1: the daemons are hosts of the fleet; else each works alone.
start_daemons() {
    local fleet=$1 profile=${2:-0} i
    for i in $(seq "$HOSTS"); do
        rm -rf "$WORK/h$i/state" "$WORK/h$i/run"
        local args=() under=()
        if [ "$fleet" = 1 ]; then
            args=(--fleet "postgresql://host$i@10.203.$i.1:$PORT/dryrun" --fleet-config "$WORK/h$i/fleet.yaml")
        fi
        if [ "$profile" = 1 ]; then
            under=(perf record -q -k mono -F 2999 --call-graph dwarf,16384 -o "$WORK/h$i/perf.data" --)
        fi
        ip netns exec "drfb$i" "${under[@]}" "$DRYRUN" daemon --socket "$WORK/h$i/run/dryrun.sock" \
            --state-dir "$WORK/h$i/state" --max-queued 256 --budget-points 0 "${args[@]}" \
            2>"$WORK/h$i/daemon.log" &
        PIDS+=($!)
    done
    for i in $(seq "$HOSTS"); do
        for _ in $(seq 200); do [ -S "$WORK/h$i/run/dryrun.sock" ] && break; sleep 0.05; done
        [ -S "$WORK/h$i/run/dryrun.sock" ] || { cat "$WORK/h$i/daemon.log"; exit 1; }
    done
    sleep 0.5
}

# CLIENTS per host, PER_CLIENT runs each, all hosts at once; prints runs/s
# and the CPU the daemons (with their helpers) and the store spent per run.
load() {
    python3 - "$WORK" "$HOSTS" "$CLIENTS" "$PER_CLIENT" "$1" "$(head -1 "$WORK/pg/data/postmaster.pid")" "${PIDS[@]}" <<'PY'
import http.client, json, os, socket, sys, threading, time
work, hosts, clients, per, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
postmaster, daemons = sys.argv[6], sys.argv[7:]
def stat(p):
    try:
        return open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
def ticks(p):
    # A process's own CPU and its reaped children's.
    f = stat(p)
    return sum(int(x) for x in f[11:15]) if f else 0
def children(p):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            f = stat(d)
            if f and f[1] == p:
                out.append(d)
    return out
def cpu():
    # Each daemon with its children (the resident helper reaps the
    # rehearsals it forks); the store's postmaster with its backends.
    d = sum(ticks(p) + sum(ticks(c) for c in children(p)) for p in daemons)
    s = ticks(postmaster) + sum(ticks(c) for c in children(postmaster))
    return d, s
class UnixConn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("dryrun"); self.path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); self.sock.connect(self.path)
errors = []
def client(h):
    c = UnixConn(f"{work}/h{h}/run/dryrun.sock")
    body = json.dumps({"command": "true", "working_dir": f"{work}/h{h}/ws"}).encode()
    for _ in range(per):
        c.request("POST", "/v1/runs?wait=true", body, {"content-type": "application/json"})
        r = c.getresponse(); data = r.read()
        if r.status != 200 or json.loads(data)["state"] == "failed":
            errors.append(data[:200])
threads = [threading.Thread(target=client, args=(h,)) for h in range(1, hosts + 1) for _ in range(clients)]
d0, s0 = cpu()
t0 = time.perf_counter()
m0 = time.monotonic()
for t in threads: t.start()
for t in threads: t.join()
wall = time.perf_counter() - t0
open(f"{work}/window", "w").write(f"{m0} {time.monotonic()}\n")
time.sleep(0.5)
d1, s1 = cpu()
n = hosts * clients * per
hz = os.sysconf("SC_CLK_TCK")
print(f"{mode}: {n} rehearsals in {wall:.2f} s = {n / wall:.1f} rehearsals/s; CPU per rehearsal: daemons {(d1 - d0) * 1000 / hz / n:.2f} ms, store {(s1 - s0) * 1000 / hz / n:.2f} ms")
if errors:
    print(f"errors: {len(errors)}; first: {errors[0]}"); sys.exit(1)
PY
}

# The fleet code's share of each profiled host's samples within the load.
fleet_share() {
    local i
    read -r M0 M1 < "$WORK/window"
    for i in $(seq "$HOSTS"); do
        perf script -i "$WORK/h$i/perf.data" -F time,ip,sym 2>/dev/null |
            python3 -c '
import sys
m0, m1, host, mode, per = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
total = fleet = 0
stack, t = [], None
def done():
    global total, fleet
    if t is not None and m0 <= t <= m1:
        total += 1
        s = "".join(stack)
        if "dryrun::fleet::" in s or "tokio_postgres::" in s or "postgres_protocol::" in s:
            fleet += 1
for line in sys.stdin:
    if not line.strip():
        done(); stack, t = [], None
    elif t is None:
        t = float(line.split()[0].rstrip(":"))
    else:
        stack.append(line)
done()
print(f"{mode} host {host} under perf: {total} samples in the load, {total / per:.1f} per rehearsal; {fleet} ({100 * fleet / max(total, 1):.1f}%) pass through the fleet code")
' "$M0" "$M1" "$i" "$1" "$((CLIENTS * PER_CLIENT))"
        [ -n "${PROFILE_KEEP:-}" ] && cp "$WORK/h$i/perf.data" "$PROFILE_KEEP/$1-h$i.data"
    done
}

echo "fleet of $HOSTS hosts (network namespaces over veths), $CLIENTS clients each, $PER_CLIENT runs of \`true\` per client"
declare -A SUM=([alone]=0 [fleet]=0)
declare -A CPU=([alone]=0 [fleet]=0)
if [ "$PROFILE" = 1 ]; then
    for mode in alone fleet; do
        start_daemons "$([ $mode = fleet ] && echo 1 || echo 0)" 1
        load "$mode (profiled, not counted)"
        stop_daemons
        fleet_share "$mode"
    done
fi
for r in $(seq "$ROUNDS"); do
    for mode in alone fleet; do
        if [ $mode = fleet ]; then
            # Fresh hosts: the store forgets the last round's.
            psql_owner "TRUNCATE dryrun.decisions, dryrun.evidence, dryrun.events, dryrun.anchors, dryrun.runs, dryrun.hosts"
        fi
        start_daemons "$([ $mode = fleet ] && echo 1 || echo 0)"
        out=$(load "$mode (round $r)")
        echo "$out"
        rate=$(sed -E 's/.* = ([0-9.]+) rehearsals.*/\1/' <<<"$out")
        SUM[$mode]=$(python3 -c "print(${SUM[$mode]} + $rate)")
        dcpu=$(sed -E 's/.*daemons ([0-9.]+) ms.*/\1/' <<<"$out")
        CPU[$mode]=$(python3 -c "print(${CPU[$mode]} + $dcpu)")
        # The last round's fleet daemons go on to the latencies.
        [ "$mode" = fleet ] && [ "$r" = "$ROUNDS" ] || stop_daemons
    done
done
python3 - "${SUM[alone]}" "${SUM[fleet]}" "$ROUNDS" "${CPU[alone]}" "${CPU[fleet]}" <<'PY'
import sys
n = int(sys.argv[3])
a, f = float(sys.argv[1]) / n, float(sys.argv[2]) / n
ca, cf = float(sys.argv[4]) / n, float(sys.argv[5]) / n
print(f"mean of {n} rounds: alone {a:.1f}/s, with the fleet store {f:.1f}/s: {100 * (a - f) / a:.1f}% fewer rehearsals/s on this machine (the store's server shares its cores)")
print(f"a host's own CPU per rehearsal: alone {ca:.2f} ms, in the fleet {cf:.2f} ms: the fleet costs the host {100 * (cf - ca) / ca:.1f}% of its throughput")
PY

# Latencies, on the fleet daemons of the last round.
echo "waiting runs: $WAITING per host"
python3 - "$WORK" "$HOSTS" "$WAITING" <<'PY'
import http.client, json, socket, sys, threading
work, hosts, waiting = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
class UnixConn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("dryrun"); self.path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); self.sock.connect(self.path)
def host(h):
    c = UnixConn(f"{work}/h{h}/run/dryrun.sock")
    for k in range(waiting):
        body = json.dumps({"command": f"gh pr merge {k} && echo x > w{k}.txt", "working_dir": f"{work}/h{h}/ws",
                           "intent": {"expected_writes": ["w*.txt"]}}).encode()
        c.request("POST", "/v1/runs?wait=true", body, {"content-type": "application/json"})
        r = c.getresponse(); rec = json.loads(r.read())
        assert rec["state"] == "awaiting_approval", rec.get("state")
ts = [threading.Thread(target=host, args=(h,)) for h in range(1, hosts + 1)]
for t in ts: t.start()
for t in ts: t.join()
PY
TOTAL=$((HOSTS * WAITING))
for _ in $(seq 600); do
    [ "$(psql_owner "SELECT count(*) FROM dryrun.runs WHERE waiting_visible_at IS NOT NULL")" -ge "$TOTAL" ] && break
    sleep 0.1
done
pct() { psql_owner "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY v)::numeric, 1) || ' ms p50, ' || round(percentile_cont(0.99) WITHIN GROUP (ORDER BY v)::numeric, 1) || ' ms p99 (' || count(*) || ' runs)' FROM ($1) x"; }
echo "waiting on a host -> waiting in the fleet: $(pct "SELECT extract(epoch FROM waiting_visible_at - waiting_since) * 1000 AS v FROM dryrun.runs WHERE waiting_visible_at IS NOT NULL")"
# A reviewer decides every waiting run, one after another, round-robin
# over the hosts.
BOB="postgresql://bob:pw-bob@127.0.0.1:$PORT/dryrun"
for id in $(psql_owner "SELECT run_id FROM dryrun.runs WHERE state = 'awaiting_approval' ORDER BY waiting_since"); do
    "$DRYRUN" approve --fleet "$BOB" "$id" --wait 0 --json >/dev/null
done
for _ in $(seq 600); do
    [ "$(psql_owner "SELECT count(*) FROM dryrun.decisions WHERE outcome IS NULL")" = 0 ] && break
    sleep 0.1
done
echo "decision -> applied by its host: $(pct "SELECT extract(epoch FROM applied_at - decided_at) * 1000 AS v FROM dryrun.decisions WHERE outcome = 'applied'")"
echo "decisions: $(psql_owner "SELECT string_agg(coalesce(outcome, 'pending') || ' ' || n, ', ') FROM (SELECT outcome, count(*) n FROM dryrun.decisions GROUP BY 1) x")"
RUNS=$(psql_owner "SELECT count(*) FROM dryrun.runs")
echo "the store after $RUNS runs (the last round's $((HOSTS * CLIENTS * PER_CLIENT)) promoted, $TOTAL decided):"
for t in hosts runs evidence events anchors decisions policies; do
    psql_owner "SELECT format('  %-10s %6s rows %8s bytes of rows %9s bytes on disk', '$t', count(*), coalesce(sum(pg_column_size(x.*)), 0), pg_total_relation_size('dryrun.$t')) FROM dryrun.$t x"
done
psql_owner "SELECT format('per run: %s rows, %s bytes of rows, %s bytes on disk (tables and indexes)',
    round(((SELECT count(*) FROM dryrun.runs) + (SELECT count(*) FROM dryrun.evidence) + (SELECT count(*) FROM dryrun.events)
       + (SELECT count(*) FROM dryrun.anchors) + (SELECT count(*) FROM dryrun.decisions))::numeric / $RUNS, 2),
    round(((SELECT coalesce(sum(pg_column_size(x.*)), 0) FROM dryrun.runs x) + (SELECT coalesce(sum(pg_column_size(x.*)), 0) FROM dryrun.evidence x)
       + (SELECT coalesce(sum(pg_column_size(x.*)), 0) FROM dryrun.events x) + (SELECT coalesce(sum(pg_column_size(x.*)), 0) FROM dryrun.anchors x)
       + (SELECT coalesce(sum(pg_column_size(x.*)), 0) FROM dryrun.decisions x))::numeric / $RUNS),
    round((pg_total_relation_size('dryrun.runs') + pg_total_relation_size('dryrun.evidence') + pg_total_relation_size('dryrun.events')
       + pg_total_relation_size('dryrun.anchors') + pg_total_relation_size('dryrun.decisions'))::numeric / $RUNS))"
