#!/usr/bin/env python3
"""Where a rehearsal's CPU goes, by process role: reads `perf script
--show-task-events -F pid,tid,comm,event,ip,sym,dso` output (from a system-wide
`perf record -g` taken while benches/daemon.sh runs) and charges every
sample to the role of its process in the daemon's tree:

  daemon (its runtime threads) -> resident helper -> H (host side)
    -> C (user namespace) -> P1 (sandbox init) -> CMD (the command, which
    execs bash) or the evidence reader

Samples of other processes are charged by name (kernel workers, the load
generator); idle time is left out. For each role it prints its share of
the busy CPU and the entry points (system calls, page faults) that cost it
the most. Usage: cpu-roles.py PERF_SCRIPT_OUTPUT [TOP]
"""
import collections
import re
import sys

parent, execd, samples, daemon = {}, set(), [], None
cur = None
for line in open(sys.argv[1], errors="replace"):
    if "PERF_RECORD" in line:
        m = re.search(r"PERF_RECORD_FORK\((\d+):(\d+)\):\((\d+):(\d+)\)", line)
        if m:
            child, _, par, _ = map(int, m.groups())
            if child != par:
                parent[child] = par
        m = re.search(r"PERF_RECORD_COMM exec: (\S+):(\d+)/", line)
        if m:
            execd.add(int(m.group(2)))
        cur = None
        continue
    m = re.match(r"\s*(.+?)\s+(\d+)/(\d+)\s+\S+:", line)
    if m:
        comm, pid = m.group(1), int(m.group(2))
        if comm == "tokio-rt-worker":
            daemon = pid
        cur = (pid, comm, [])
        samples.append(cur)
        continue
    m = re.match(r"\s+[0-9a-f]+ (\S+).*\((.*)\)\s*$", line)
    if m and cur:
        sym = m.group(1) if "kernel" in m.group(2) else "user:" + m.group(1)
        cur[2].append(sym)

ROLES = {1: "resident helper", 2: "H (host side)", 3: "C (user namespace)", 4: "P1 (sandbox init)"}


def role(pid, comm):
    if pid == daemon:
        return "daemon (runtime threads)"
    depth, p = 0, pid
    while p in parent:
        p, depth = parent[p], depth + 1
        if p == daemon:
            if depth == 5:
                return "CMD (bash)" if pid in execd else "evidence reader"
            return ROLES.get(depth, "deeper")
    if comm == "swapper":
        return None
    name = re.sub(r"[/:]\d+.*$", "", comm)
    return "kernel: " + name if comm.startswith(("kworker", "ksoftirq", "rcu")) else "other: " + name


def entry(stack):
    for s in reversed(stack):
        if s.startswith(("__x64_sys_", "__do_sys_")) or s in ("asm_exc_page_fault", "ret_from_fork_asm"):
            return s.replace("__x64_sys_", "").replace("__do_sys_", "").replace("asm_exc_page_fault", "page fault")
    if stack and stack[0].startswith("user:"):
        return "user space"
    return "kernel (interrupts, scheduling)"


by_role = collections.defaultdict(collections.Counter)
for pid, comm, stack in samples:
    r = role(pid, comm)
    if r:
        by_role[r][entry(stack)] += 1
busy = sum(sum(c.values()) for c in by_role.values())
top = int(sys.argv[2]) if len(sys.argv) > 2 else 5
print(f"busy samples: {busy}")
print("| role | share of busy CPU | largest parts |")
print("|---|---:|---|")
for r, c in sorted(by_role.items(), key=lambda kv: -sum(kv[1].values())):
    n = sum(c.values())
    if n * 200 < busy:
        continue
    parts = ", ".join(f"{k} {100 * v / n:.0f}%" for k, v in c.most_common(top))
    print(f"| {r} | {100 * n / busy:.1f}% | {parts} |")
