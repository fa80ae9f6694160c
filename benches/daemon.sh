#!/usr/bin/env bash
# Rehearsals per second through the daemon, and the daemon's memory.
#
#   benches/daemon.sh                 # 8 clients x 50 runs of `true`
#   CLIENTS=8 PER_CLIENT=100 MAX_RUNNING=4 benches/daemon.sh
#   DRYRUN_RESIDENT_HELPER=0 benches/daemon.sh   # an exec of the helper per run
#   CLIENT_USER=nobody benches/daemon.sh           # clients and workspace of an ordinary user
#   DRYRUN_BIN=/path/to/other/dryrun benches/daemon.sh   # compare another build
#
# Starts a release-build daemon on its own socket and state directory (as
# root: ids shifted, cgroup limits), measures its RSS idle, then has CLIENTS
# concurrent HTTP clients each submit PER_CLIENT envelopes of `true` with
# `?wait=true` (one request = one full rehearsal + verdict + two journal
# fsyncs), and prints throughput, latency percentiles and RSS after the load.
# With CLIENT_USER, the clients connect as that user (through
# `--socket-group`) and the workspace is theirs, as with agents on a shared
# root daemon: the daemon then reads the workspace with the owner's rights.
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=${CLIENTS:-8}
PER_CLIENT=${PER_CLIENT:-50}
# Unset: the daemon's own default (twice the cores).
MAX_RUNNING=${MAX_RUNNING:-}
COMMAND=${COMMAND:-true}
# DRYRUN_BIN: another build of the binary, to compare (then nothing is built).
if [ -n "${DRYRUN_BIN:-}" ]; then
    DRYRUN=$DRYRUN_BIN
else
    cargo build --release --quiet
    DRYRUN=$PWD/target/release/dryrun
fi
WORK=$(mktemp -d /var/tmp/dryrun-daemon-bench.XXXXXX)
# TRASH_DIR (benches/speed.sh sets it): the work directory is moved there
# instead of deleted, so the next measurement does not meet thousands of
# freshly freed inodes (see speed.sh).
cleanup() {
    kill "${PID:-}" 2>/dev/null || true
    wait "${PID:-}" 2>/dev/null || true
    if [ -n "${TRASH_DIR:-}" ] && [ -d "$TRASH_DIR" ]; then
        mv "$WORK" "$TRASH_DIR/"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
mkdir -p "$WORK/ws"
echo "hello" > "$WORK/ws/README.md"
SOCK=$WORK/run/dryrun.sock
CLIENT_USER=${CLIENT_USER:-}
# The system python: a per-user install (pyenv under /root) is out of the client user's reach.
PYTHON=$(command -v python3)
[ -z "$CLIENT_USER" ] || PYTHON=/usr/bin/python3
AS_CLIENT=()
GROUP_ARGS=()
if [ -n "$CLIENT_USER" ]; then
    chmod 755 "$WORK"
    chown -R "$CLIENT_USER:$(id -gn "$CLIENT_USER")" "$WORK/ws"
    AS_CLIENT=(setpriv --reuid="$CLIENT_USER" --regid="$(id -g "$CLIENT_USER")" --init-groups --)
    GROUP_ARGS=(--socket-group "$(id -gn "$CLIENT_USER")")
fi
"$DRYRUN" daemon --socket "$SOCK" --state-dir "$WORK/state" "${GROUP_ARGS[@]}" \
    ${MAX_RUNNING:+--max-running "$MAX_RUNNING"} --max-queued 256 --budget-points 0 \
    2>"$WORK/daemon.log" &
PID=$!
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.05; done
sleep 0.5
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$PID/status"; }
IDLE=$(rss)

"${AS_CLIENT[@]}" "$PYTHON" - "$SOCK" "$WORK/ws" "$CLIENTS" "$PER_CLIENT" "$COMMAND" "$IDLE" "$PID" <<'PY'
import json, os, socket, sys, threading, time, http.client

sock, ws, clients, per, command, idle, pid = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6]), sys.argv[7]

class UnixConn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("dryrun")
        self.path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)

body = json.dumps({"command": command, "working_dir": ws}).encode()
lat, errors, peak = [], [], [0]

def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0

def client():
    c = UnixConn(sock)
    for _ in range(per):
        t = time.perf_counter()
        c.request("POST", "/v1/runs?wait=true", body, {"content-type": "application/json"})
        r = c.getresponse()
        data = r.read()
        lat.append(time.perf_counter() - t)
        if r.status != 200:
            errors.append((r.status, data[:200]))
        else:
            rec = json.loads(data)
            if rec["state"] == "failed":
                errors.append(("failed", rec.get("error")))

def sampler(stop):
    while not stop.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.05)

stop = threading.Event()
s = threading.Thread(target=sampler, args=(stop,)); s.start()
threads = [threading.Thread(target=client) for _ in range(clients)]
def ticks(p):
    # A process's own CPU plus its reaped children's.
    f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:15])

def resident():
    # The resident sandbox helper (a child of the daemon) reaps the hosts it
    # forks, so their CPU counts there, not in the daemon's children.
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                st = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
                cmd = open(f"/proc/{d}/cmdline", "rb").read()
            except OSError:
                continue
            if st[1] == pid and b"__sandbox-resident" in cmd:
                return d
    return None

res = resident()
def cpu_ticks():
    return ticks(pid) + (ticks(res) if res else 0)
def machine():
    # All CPUs: (busy, total) ticks; idle and iowait are not busy.
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f) - f[3] - f[4], sum(f)
cpu0 = cpu_ticks()
m0 = machine()
t0 = time.perf_counter()
for t in threads: t.start()
for t in threads: t.join()
wall = time.perf_counter() - t0
cpu_ms = (cpu_ticks() - cpu0) * 1000 / os.sysconf("SC_CLK_TCK")
m1 = machine()
busy_ms = (m1[0] - m0[0]) * 1000 / os.sysconf("SC_CLK_TCK")
busy_share = (m1[0] - m0[0]) / max(m1[1] - m0[1], 1)
stop.set(); s.join()
lat.sort()
n = len(lat)
pct = lambda p: lat[min(n - 1, int(p * n))] * 1000
print(f"clients: {clients} x {per} runs of {command!r}")
print(f"rehearsals: {n} in {wall:.2f} s = {n / wall:.1f} rehearsals/s")
print(f"CPU per rehearsal (daemon and its helpers): {cpu_ms / max(n, 1):.1f} ms" + ("" if res else " (no resident helper)"))
print(f"machine CPU busy: {busy_share * 100:.0f}% of {os.cpu_count()} cores, {busy_ms / max(n, 1):.1f} ms per rehearsal (clients and kernel workers included)")
print(f"latency ms: p50 {pct(0.5):.1f}  p90 {pct(0.9):.1f}  p99 {pct(0.99):.1f}")
time.sleep(3)
print(f"daemon RSS: idle {idle / 1024:.1f} MiB, peak under load {peak[0] / 1024:.1f} MiB, idle again 3 s later {rss() / 1024:.1f} MiB")
if errors:
    print(f"errors: {len(errors)}; first: {errors[0]}")
    sys.exit(1)
PY
