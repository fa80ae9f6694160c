#!/bin/sh
# Rewrite the sample outputs shown in README.md and docs/ from fresh runs:
# the example tasks (examples/site), the README's tour on a copy of it, and
# the hooks fed the agent hosts' events, normalised as
# tests/docs_samples.rs checks them (run ids, timestamps, durations, the
# workspace's and state directory's paths). Run as root: the samples show
# a root rehearsal. Then the README's quotes are refreshed from them.
set -eu
cd "$(dirname "$0")/../.."
DRYRUN_UPDATE_SAMPLES=1 cargo test --test docs_samples committed_samples_match_a_fresh_run "$@"
docs/samples/fill-readme.py
