#!/usr/bin/env python3
"""Announce new posts to a (fictional) web service. In a rehearsal the
network is cut, and dryrun records where it would have connected."""
import json
import pathlib
import urllib.request

posts = sorted(p.name for p in pathlib.Path("blog").glob("*.md"))
req = urllib.request.Request(
    "http://203.0.113.10/api/announce",
    data=json.dumps({"posts": posts}).encode(),
    headers={"content-type": "application/json"},
    method="POST",
)
try:
    with urllib.request.urlopen(req, timeout=5) as resp:
        print("announced:", resp.status)
except OSError as e:
    print("could not announce:", e)
    raise SystemExit(1)
