"""The Python client's whole API against a real daemon: network (by name,
by the npm preset, beyond the system's ceiling), stubs, live, wait,
withdraw and cancel. The daemon runs under a system policy (a root-owned
directory, DRYRUN_SYSTEM_POLICY_DIR) that pins a loopback stand-in
registry's name and bounds what a run may ask for."""
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from dryrun_client import (  # noqa: E402
    Client, DryrunError, Envelope, Intent, Limits, Live, Network)

NAME = "registry.test"


class _Handler(http.server.BaseHTTPRequestHandler):
    seen = []

    def do_GET(self):
        _Handler.seen.append(self.path)
        port = self.server.server_address[1]
        body = ('{"name":"demo-pkg","dist-tags":{"latest":"1.0.0"},"versions":{"1.0.0":'
                '{"name":"demo-pkg","version":"1.0.0","dist":{"tarball":'
                f'"http://{NAME}:{port}/demo-pkg/-/demo-pkg-1.0.0.tgz"}}}}}}').encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture()
def registry():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Handler.seen.clear()
    yield srv.server_address[1]
    srv.shutdown()


@pytest.fixture()
def daemon(tmp_path, registry):
    policy = tmp_path / "policy"
    policy.mkdir(mode=0o755)
    os.chmod(policy, 0o755)
    host = f"{NAME}:{registry}"
    (policy / "egress.yaml").write_text(
        f"egress:\n  resolve: ['{host}:127.0.0.1']\n  ceiling: ['{host}']\n")
    os.chmod(tmp_path, 0o755)
    sock = tmp_path / "dryrun.sock"
    proc = subprocess.Popen(
        [os.environ["DRYRUN_BIN"], "daemon", "--socket", str(sock),
         "--state-dir", str(tmp_path / "state")],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "daemon.log", "w"),
        env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "DRYRUN_SYSTEM_POLICY_DIR": str(policy)})
    client = Client(str(sock))
    deadline = time.time() + 30
    while True:
        try:
            client.health()
            break
        except OSError:
            assert time.time() < deadline, (tmp_path / "daemon.log").read_text()
            time.sleep(0.1)
    yield client
    proc.terminate()
    proc.wait(timeout=60)


@pytest.fixture()
def workspace(tmp_path, registry):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".npmrc").write_text(f"registry=http://{NAME}:{registry}/\n")
    return ws


def test_network_by_name_and_by_preset_reaches_the_registry(daemon, workspace, registry):
    host = f"{NAME}:{registry}"
    by_name = daemon.execute(Envelope(
        command=f"curl -sS -o meta.json http://{host}/demo-pkg", working_dir=str(workspace),
        intent=Intent(expected_writes=["meta.json"], network=Network(allow=[host]))))
    assert by_name.decision == "promote", by_name.reasons
    assert any(e["name"] == NAME and e["allowed"] for e in by_name.record["rehearsal"]["egress"])
    assert daemon.promote(by_name.run_id).state == "promoted"
    assert "demo-pkg" in (workspace / "meta.json").read_text()
    # The preset is read from the project's npmrc as data (no npm runs to
    # find out), and the record says so.
    read = daemon.execute(Envelope(command="true", working_dir=str(workspace),
                                   intent=Intent(network=["npm"])))
    assert read.record["intent"]["network"] == [host]
    assert "project's .npmrc" in read.record["intent"]["network_presets"][0]
    if shutil.which("npm"):
        seen = len(_Handler.seen)
        by_preset = daemon.execute(Envelope(
            command="npm view demo-pkg version --cache /tmp/npm-cache --update-notifier=false",
            working_dir=str(workspace), intent=Intent(network=["npm"]),
            limits=Limits(timeout_s=120)))
        assert by_preset.decision == "promote", (by_preset.reasons, by_preset.output)
        assert by_preset.record["intent"]["network"] == [host]
        assert len(_Handler.seen) > seen


def test_an_entry_beyond_the_ceiling_is_refused_naming_it(daemon, workspace):
    with pytest.raises(DryrunError) as e:
        daemon.execute(Envelope(command="true", working_dir=str(workspace),
                                intent=Intent(network=["beyond.test"])))
    assert e.value.status == 400
    assert "beyond.test" in e.value.message and "egress.ceiling" in e.value.message


def test_a_preset_nothing_configures_is_refused_naming_the_setting(daemon, workspace, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    t0 = time.time()
    with pytest.raises(DryrunError) as e:
        daemon.execute(Envelope(command="true", working_dir=str(workspace),
                                caller_env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
                                intent=Intent(network=["goproxy"])))
    assert time.time() - t0 < 5
    assert e.value.status == 400
    assert "preset goproxy" in e.value.message and "egress.presets.goproxy" in e.value.message


def test_an_unlisted_name_fails_fast_and_is_named(daemon, workspace, registry):
    t0 = time.time()
    run = daemon.execute(Envelope(
        command=f"curl -sS http://unlisted.test:{registry}/x", working_dir=str(workspace),
        intent=Intent(network=[f"{NAME}:{registry}"]), limits=Limits(timeout_s=60)))
    assert time.time() - t0 < 15
    assert run.blocked
    assert any(e["name"] == "unlisted.test" and not e["allowed"]
               for e in run.record["rehearsal"]["egress"])


def test_stubs_live_wait_withdraw_and_cancel(daemon, workspace):
    stubbed = daemon.execute(Envelope(
        command="gh pr merge 1", working_dir=str(workspace),
        stubs={"merge": {"match": {"command": "gh", "subcommand": "pr merge"},
                         "answer": {"stdout": "merged (stub)\n", "exit": 0}}},
        live=Live(mode="apply")))
    assert "merged (stub)" in stubbed.stdout
    assert stubbed.record["rehearsal"].get("stubbed_calls") or stubbed.state
    # A run that writes where the intent does not expect waits; its
    # submitter withdraws it.
    waiting = daemon.execute(Envelope(command="echo x > surprise.txt", working_dir=str(workspace),
                                      intent=Intent(expected_writes=["out/**"])))
    assert waiting.state == "awaiting_approval"
    assert daemon.withdraw(waiting.run_id, "not needed").state == "rejected"
    # A long rehearsal, submitted without waiting, is cancelled.
    rid = daemon.submit(Envelope(command="sleep 30", working_dir=str(workspace)))
    daemon.wait(rid, 5)
    done = daemon.cancel(rid)
    assert done.state == "failed"
    assert daemon.wait(rid, 1).state == "failed"
