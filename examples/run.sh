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
    if ! pkg-config --exists libseccomp 2>/dev/null; then
        echo "dryrun needs libseccomp's development files; installing them (Debian/Ubuntu)..." >&2
        SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
        $SUDO apt-get install -y -q libseccomp-dev pkg-config >&2
    fi
    cargo build --release --quiet
fi
if [ "$#" -eq 0 ]; then set -- --task normalize-blog-frontmatter; fi
exec "$bin" execute --workspace examples/site "$@"
