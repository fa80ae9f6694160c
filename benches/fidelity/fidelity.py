#!/usr/bin/env python3
"""The fidelity harness: real workflows on real projects, each run directly
in one copy and rehearsed + promoted by dryrun in another, as root and as
an ordinary user; their exit statuses and trees compared.

    fidelity.py prepare [--cache DIR]
    fidelity.py report FILE.json
    fidelity.py run --dryrun PATH [--identities root,user] [--workflows a,b,...]
                    [--repeat N] [--baseline] [--json FILE] [--cache DIR]

`run` prints a table (SAME / DIFFERENT / REFUSED per workflow and identity,
with rehearse + promote time against the direct run's) and the reasons for
every result that is not SAME; `--json` also writes every result as JSON.
Runs as root. See docs/fidelity.md for the method and the normalisation.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import homes  # noqa: E402
import lanes  # noqa: E402
import projects  # noqa: E402
import standin  # noqa: E402
import workflows  # noqa: E402

REPO = HERE.parent.parent
DEFAULT_CACHE = REPO / "target" / "fidelity" / "cache"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def _work_dir(ident):
    """A fresh directory in the identity's home for this run's projects
    (a project inside a home is where users keep them)."""
    parent = ident.home / "dryrun-fidelity"
    if not parent.exists():
        parent.mkdir(mode=0o755)
        os.chown(parent, ident.uid, ident.gid)
    d = Path(tempfile.mkdtemp(prefix="run-", dir=parent))
    os.chmod(d, 0o755)
    os.chown(d, ident.uid, ident.gid)
    return d


def run(args):
    cache = projects.Cache(args.cache).fetch(log)
    names = [n for n in args.identities.split(",") if n]
    selected = workflows.select([w for w in (args.workflows or "").split(",") if w])
    t0 = time.monotonic()
    idents = homes.make(names, cache.wheels)
    log(f"identities ready: {time.monotonic() - t0:.1f} s")
    for ident in idents:
        log("identity " + ident.describe())
    registry = standin.Registry(cache.wheel_files(), cache.npm_files()).start()
    service = standin.Service().start()
    scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=Path(args.cache).parent))
    os.chmod(scratch, 0o755)
    results = []
    try:
        for ident in idents:
            work = _work_dir(ident)
            try:
                t = projects.Templates(cache, ident, work, registry)
                t0 = time.monotonic()
                t.build(sorted({w.project for w in selected}), log)
                log(f"  templates of {ident.name}: {time.monotonic() - t0:.1f} s")
                ctx = lanes.Context(args.dryrun, ident, t, registry, service, scratch, args.baseline)
                for wf in selected:
                    results.append(lanes.repeated(ctx, wf, args.repeat, log))
            finally:
                shutil.rmtree(work, ignore_errors=True)
                try:
                    work.parent.rmdir()
                except OSError:
                    pass
    finally:
        registry.stop()
        service.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    report = {
        "identities": {i.name: i.describe() for i in idents},
        "registry_requests": len(registry.requests),
        "service_connections": service.connections,
        "results": results,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    print_table(report, [w.name for w in selected], names)
    return 0


def _cell(r):
    if r is None:
        return "-", "-"
    ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
    return r["result"], f"{r['dryrun_s']:.1f} s / {r['direct_s']:.1f} s ({ratio})"


def print_table(report, order, names):
    by = {(r["workflow"], r["identity"]): r for r in report["results"]}
    head = "| workflow | project | " + " | ".join(f"{n} | {n}: dryrun / direct" for n in names) + " |"
    print(head)
    print("|---|---|" + "---|---:|" * len(names))
    for w in order:
        project = workflows.BY_NAME[w].project
        cells = []
        for n in names:
            cells.extend(_cell(by.get((w, n))))
        print(f"| {w} | {project} | " + " | ".join(cells) + " |")
    print()
    for n in names:
        rs = [r for r in report["results"] if r["identity"] == n and r["ratio"] is not None]
        # The controls take no time of their own: their ratio is dryrun's
        # fixed cost, not a workflow's.
        same = [r["ratio"] for r in rs if r["result"] == lanes.SAME and not r["workflow"].startswith("control-")]
        counts = {k: sum(1 for r in rs if r["result"] == k) for k in (lanes.SAME, lanes.DIFFERENT, lanes.REFUSED)}
        med = f"{statistics.median(same):.2f}x (worst {max(same):.2f}x)" if same else "-"
        print(f"{n}: {counts[lanes.SAME]} SAME, {counts[lanes.DIFFERENT]} DIFFERENT, {counts[lanes.REFUSED]} REFUSED;"
              f" rehearse + promote / direct, median over the SAME workflows (controls aside): {med}")
    print()
    print("Why each workflow that is not SAME is not:")
    for r in report["results"]:
        if r["result"] == lanes.SAME:
            continue
        print(f"- {r['workflow']} ({r['identity']}): {r['result']}")
        for reason in r["reasons"][:14]:
            print(f"    - {' | '.join(line for line in reason.splitlines() if line.strip())}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("report", help="print the table of a --json file again")
    t.add_argument("json")
    p = sub.add_parser("prepare", help="fetch the pinned projects into the cache")
    p.add_argument("--cache", default=str(DEFAULT_CACHE))
    r = sub.add_parser("run", help="run the workflows")
    r.add_argument("--dryrun", required=True, help="the dryrun binary")
    r.add_argument("--identities", default="root,user")
    r.add_argument("--workflows", help="comma-separated names (default: all)")
    r.add_argument("--repeat", type=int, default=1,
                   help="run each workflow N times: times are medians, and a result that changes between repetitions is named")
    r.add_argument("--json", help="write every result here")
    r.add_argument("--baseline", action="store_true",
                   help="compare the direct lane with itself (the normalisation's noise floor; every workflow should be SAME)")
    r.add_argument("--cache", default=str(DEFAULT_CACHE))
    args = ap.parse_args()
    try:
        if args.cmd == "report":
            report = json.loads(Path(args.json).read_text())
            names = list(dict.fromkeys(r["identity"] for r in report["results"]))
            order = list(dict.fromkeys(r["workflow"] for r in report["results"]))
            print_table(report, order, names)
            return 0
        if args.cmd == "prepare":
            projects.Cache(args.cache).fetch(log)
            return 0
        return run(args)
    except (homes.SetupError, projects.FetchError) as e:
        log(f"fidelity: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
