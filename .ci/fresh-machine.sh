#!/usr/bin/env bash
# Fresh-machine check: follow only the README's quick start on a freshly
# made Debian stable root filesystem that has nothing but a Rust toolchain.
# As root:
#
#   .ci/fresh-machine.sh [CARGO TEST ARGS for ./tests/run.sh...]
#   e.g. .ci/fresh-machine.sh --test example_site --test daemon_start --test docs_samples
#
# Makes the rootfs with mmdebstrap (minbase + ca-certificates) from the same
# mirror as the host's apt sources, copies the host's Rust toolchain
# (/root/.cargo/bin copied, /root/.rustup bind-mounted read-only) in, bind-mounts the host's cargo registry
# (to save downloads), copies HEAD in with `git archive`, enters it with
# pivot_root in a mount namespace of its own (/proc, /sys, /dev, /sys/fs/cgroup mounted; the host's resolv.conf)
# and runs `./examples/run.sh` (must exit 4 with the documented sample) then
# `./tests/run.sh ARGS`. The rootfs lives under the repository's target/
# (never under /tmp or /var/tmp: its mounts there would show in every
# rehearsal's view of those directories on this host) and is removed at the
# end (KEEP_ROOTFS=1 keeps it).
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "fresh-machine: run as root" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
export DEBIAN_FRONTEND=noninteractive
command -v mmdebstrap >/dev/null || { apt-get update -qq; apt-get install -y -qq mmdebstrap; }

# The host's Debian mirror, read at run time (deb822 or one-line sources).
mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | awk '/^URIs:/ {print $2; exit}')
[ -n "$mirror" ] || mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | awk '$1=="deb" && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}')
[ -n "$mirror" ] || { echo "fresh-machine: no apt mirror found in /etc/apt" >&2; exit 2; }

mkdir -p "$repo/target"
root=$(mktemp -d "$repo/target/fresh-root.XXXXXX")
mounted=()
cleanup() {
    for ((i=${#mounted[@]}-1; i>=0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
    if [ "${KEEP_ROOTFS:-0}" != 1 ]; then rm -rf --one-file-system "$root"; else echo "rootfs kept: $root"; fi
}
trap cleanup EXIT
trap "exit 130" INT TERM
t0=$(date +%s)
step() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }

step "mmdebstrap stable (minbase) from $mirror"
mmdebstrap --variant=minbase --include=ca-certificates stable "$root" "$mirror"

step "Rust toolchain, repository"
mkdir -p "$root/root/.cargo"
cp -a /root/.cargo/bin "$root/root/.cargo/bin"
mkdir -p "$root/root/.cargo/registry"
mkdir -p "$root/src/dryrun"
git -C "$repo" archive HEAD | tar -x -C "$root/src/dryrun"

bind() { mkdir -p "$root$2"; mount "${3:---bind}" "$1" "$root$2"; mounted+=("$root$2"); }
# The new root a mount of its own, as / is on a machine (a chroot into a
# plain directory has no mount at /, and the sandbox makes / private).
mount --bind "$root" "$root"; mounted+=("$root")
mount -t proc proc "$root/proc"; mounted+=("$root/proc")
bind /sys /sys --rbind; mount --make-rslave "$root/sys"
bind /dev /dev --rbind; mount --make-rslave "$root/dev"
# /sys/fs/cgroup comes with the recursive /sys bind; make sure it is there.
mountpoint -q "$root/sys/fs/cgroup" || bind /sys/fs/cgroup /sys/fs/cgroup --rbind
# The host's toolchain read-only (disk is tight: no 3 GB copy).
bind /root/.rustup /root/.rustup; mount -o remount,bind,ro "$root/root/.rustup"
[ -d /root/.cargo/registry ] && bind /root/.cargo/registry /root/.cargo/registry
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
# This network's trust anchors, as a machine on it is configured (a
# TLS-inspecting proxy's CA in /usr/local/share/ca-certificates): the
# package registries are reached through it.
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
fi

in_root() {
    # The new root entered as a machine's is: its own mount namespace, the
    # root pivoted (not a chroot: a process's files and its root are then on
    # the same mounts, as the sandbox's set-up expects), the host's root
    # detached.
    unshare --mount --fork -- /bin/sh -c '
        set -e
        mount --make-rprivate /
        cd "$1"; mkdir -p .oldroot
        pivot_root . .oldroot
        cd /
        /.oldroot/bin/umount -l /.oldroot
        rmdir /.oldroot
        shift; exec "$@"' sh "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" \
        PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        DRYRUN_TEST_REQUIRE_ROOT=1 DRYRUN_TEST_REQUIRE_TOOLS=1 \
        NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
        ${DRYRUN_EXPECT_LANDLOCK_ABI:+DRYRUN_EXPECT_LANDLOCK_ABI=$DRYRUN_EXPECT_LANDLOCK_ABI} \
        ${DRYRUN_EXPECT_CGROUP:+DRYRUN_EXPECT_CGROUP=$DRYRUN_EXPECT_CGROUP} \
        /bin/bash -c "cd /src/dryrun && $1"
}

step "./examples/run.sh"
set +e; in_root ./examples/run.sh > "$root/examples.out" 2>&1; rc=$?; set -e
cat "$root/examples.out"
if [ "$rc" != 4 ]; then echo "fresh-machine: ./examples/run.sh exited $rc, expected 4" >&2; exit 1; fi
grep -q '^dryrun run .* task normalize-blog-frontmatter' "$root/examples.out" \
    || { echo "fresh-machine: ./examples/run.sh output is not the documented sample" >&2; exit 1; }

step "./tests/run.sh $*"
in_root "./tests/run.sh $(printf '%q ' "$@")"
step "done"
