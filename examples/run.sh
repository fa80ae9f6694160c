#!/bin/sh
# Build dryrun (only when the binary is missing or older than its sources)
# and rehearse the bundled example task. Extra arguments are passed to
# `dryrun execute` (e.g. --json, or --task normalize-posts-only).
set -eu
cd "$(dirname "$0")/.."
bin=./target/release/dryrun
stale() {
    [ ! -x "$bin" ] && return 0
    # Anything the binary is built from (sources, compiled-in policies and
    # images, the manifest and lock file) newer than the binary.
    [ -n "$(find src policies sandbox-images build.rs Cargo.toml Cargo.lock \
        -newer "$bin" -print 2>/dev/null | head -n 1)" ]
}
if stale; then
    cargo build --release --quiet
fi
if [ "$#" -eq 0 ]; then set -- --task normalize-blog-frontmatter; fi
exec "$bin" execute --workspace examples/site "$@"
