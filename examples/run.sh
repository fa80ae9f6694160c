#!/bin/sh
# Build dryrun and rehearse the bundled example task. Extra arguments are
# passed to `dryrun execute` (e.g. --json, or --task normalize-posts-only).
set -eu
cd "$(dirname "$0")/.."
if ! pkg-config --exists libseccomp 2>/dev/null; then
    echo "dryrun needs libseccomp's development files; installing them (Debian/Ubuntu)..." >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get install -y -q libseccomp-dev pkg-config >&2
fi
cargo build --release --quiet
if [ "$#" -eq 0 ]; then set -- --task normalize-blog-frontmatter; fi
exec ./target/release/dryrun execute --workspace examples/site "$@"
