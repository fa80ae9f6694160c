#!/bin/sh
# bubblewrap baseline for benches/rehearsal.sh: a private mount namespace
# with a tmpfs-backed overlay over the workspace (as dryrun does), then bwrap
# with every namespace unshared, the host /usr and /etc read-only, fresh
# /tmp, /dev and /proc, running `bash -c CMD` in the workspace as the
# workspace's owner.
# Debian 12's bwrap (0.8) has no --overlay-src, so the overlay is mounted
# here first. Usage: bwrap-overlay.sh WORKSPACE CMD   (as root)
set -eu
ws=$1 cmd=$2
exec unshare -m --propagation private sh -c '
set -eu
ws=$1 cmd=$2 s=$(mktemp -d /tmp/bwrap-bench.XXXXXX)
mount -t tmpfs -o size=1g t "$s"
mkdir "$s/u" "$s/w" "$s/m"
chown "$(stat -c %u:%g "$ws")" "$s/u"
mount -t overlay overlay -o "lowerdir=$ws,upperdir=$s/u,workdir=$s/w" "$s/m"
set -- --unshare-all --die-with-parent --new-session --ro-bind /usr /usr --ro-bind /etc /etc \
    --dev /dev --proc /proc --tmpfs /tmp --bind "$s/m" "$ws" --chdir "$ws"
for l in bin sbin lib lib64; do
    if [ -L "/$l" ]; then set -- "$@" --symlink "$(readlink "/$l")" "/$l"; elif [ -d "/$l" ]; then set -- "$@" --ro-bind "/$l" "/$l"; fi
done
# As the workspace owner, like dryrun'"'"'s command (root inside a user
# namespace could not write files of unmapped owners).
setpriv --reuid="$(stat -c %u "$ws")" --regid="$(stat -c %g "$ws")" --clear-groups -- bwrap "$@" bash -c "$cmd"
' sh "$ws" "$cmd"
