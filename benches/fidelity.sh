#!/usr/bin/env bash
# Fidelity: real workflows on real projects, each run directly in one copy
# and rehearsed + promoted by dryrun (`execute`, then `promote`) in another
# at the same path, as root and as an ordinary user (dryrun-test), with the
# toolchains where those users keep them. Prints SAME / DIFFERENT / REFUSED
# per workflow and identity, rehearse + promote time against the direct
# run's (medians over the repetitions), and why each result that is not
# SAME is not. Method, projects, normalisation: docs/fidelity.md.
#
#   benches/fidelity.sh                       every workflow, root and user
#   REPEAT=3 benches/fidelity.sh              times as medians of 3 runs
#   WORKFLOWS=cargo-test,pytest benches/fidelity.sh
#   IDENTITIES=user benches/fidelity.sh
#   BASELINE=1 benches/fidelity.sh            the direct lane against itself:
#                                             the comparison's noise floor
#   DRYRUN=target/debug/dryrun benches/fidelity.sh   (default: a release build)
#
# As root. Needs the package registries the first time (the pinned projects
# are cached under target/fidelity/cache), python3, git, make, npm and
# root's rustup; sets up the user's toolchains in its home (see
# benches/fidelity/homes.py). The JSON of every result goes to
# ${OUT:-target/fidelity/latest.json}.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root (the workflows run as root and as dryrun-test)" >&2; exit 1; }
if [ -z "${DRYRUN:-}" ]; then
    cargo build --release --quiet
    DRYRUN=$PWD/target/release/dryrun
fi
OUT=${OUT:-target/fidelity/latest.json}
mkdir -p "$(dirname "$OUT")"
args=(run --dryrun "$DRYRUN" --identities "${IDENTITIES:-root,user}" --repeat "${REPEAT:-1}" --json "$OUT")
[ -n "${WORKFLOWS:-}" ] && args+=(--workflows "$WORKFLOWS")
[ "${BASELINE:-0}" = 1 ] && args+=(--baseline)
exec /usr/bin/python3 benches/fidelity/fidelity.py "${args[@]}"
