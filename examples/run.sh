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
# What a fresh Debian/Ubuntu machine with only a Rust toolchain lacks: a C
# linker for cargo, and Debian's python3 that the example task runs.
need=""
command -v cc >/dev/null 2>&1 || need="$need gcc libc6-dev"
[ -x /usr/bin/python3 ] || need="$need python3"
if [ -n "$need" ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq $need >/dev/null
fi
if stale; then
    cargo build --release --quiet
fi
if [ "$#" -eq 0 ]; then set -- --task normalize-blog-frontmatter; fi
exec "$bin" execute --workspace examples/site "$@"
