#!/bin/sh
# The kernel's floor for a rehearsal's shape, for benches/speed.sh: a new
# user, network and mount namespace (`unshare -Urnm`), a tmpfs-backed
# overlay over the workspace mounted at its own path, `bash -c CMD` in it,
# then a walk of the upper layer (the change list). No image, no /proc,
# no Landlock, seccomp, cgroups, pid namespace or record: what any tool of
# this shape cannot go below.   Usage: unshare-overlay.sh WORKSPACE CMD
set -eu
ws=$1 cmd=$2
exec unshare -Urnm --propagation private sh -c '
set -eu
ws=$1 cmd=$2
mount -t tmpfs -o size=1g t /tmp
mkdir /tmp/u /tmp/w
mount -t overlay overlay -o "lowerdir=$ws,upperdir=/tmp/u,workdir=/tmp/w" "$ws"
cd "$ws" && bash -c "$cmd"
find /tmp/u -printf "%y %p\n" >/dev/null
' sh "$ws" "$cmd"
