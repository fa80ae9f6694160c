"""The workflows: what an agent runs in a project, one shell string each.

`network`: None (no network), "registry" (the stand-in registry through
the egress allowlist: the envelope allows `registry.fidelity.test:PORT`,
and the system configuration pins that name to 127.0.0.1 with
`--egress-resolve`), or "service" (the host's loopback service, declared in
`intent.network.services` and listed as rehearsable in the system policy).

`check`: an extra condition beyond exit status and tree ("cache": the
record's `rehearsal.outside_writes` names the write under ~/.cache).

`note`: why the workflow is there, when its name does not say.

Placeholders in commands: {service_port}.
"""


class Workflow:
    def __init__(self, name, project, command, network=None, check=None, note=""):
        self.name = name
        self.project = project
        self.command = command
        self.network = network
        self.check = check
        self.note = note

    def command_for(self, service=None):
        return self.command.replace("{service_port}", str(service.port) if service else "0")


SERVICE_CLIENT = (
    "python -c 'import socket; s = socket.create_connection((\"127.0.0.1\", {service_port}), 5); "
    "s.sendall(b\"GET answer\\n\"); open(\"service.txt\", \"wb\").write(s.makefile(\"rb\").readline())'"
)

# A tool of the project's own that keeps its state in the home's cache (a
# script file, as a tool is: the same code given inline with `python -c`
# asks before it runs, exec.inline_code.write_outside, which is not what
# this workflow compares).
CACHE_WRITER = "python tools/cache_state.py > cache-report.txt"

WORKFLOWS = [
    # Controls: the comparison itself.
    Workflow("control-same", "six", "mkdir -p out && printf 'fidelity\\n' > out/a.txt && chmod 0750 out && cp -p six.py out/",
             note="a command that depends on nothing of the world: SAME, or the harness is broken"),
    Workflow("control-different", "six", "cat /proc/1/comm > init.txt",
             note="records pid 1's name, which a rehearsal (its own pid namespace) cannot share: always DIFFERENT"),
    Workflow("control-refused", "six", "getent hosts unlisted.fidelity.test > lookup.txt; true",
             note="looks up a name no allowlist names: dryrun blocks it, always REFUSED"),
    # Rust: the crate with vendored dependencies.
    Workflow("cargo-build", "either", "cargo build"),
    Workflow("cargo-test", "either", "cargo test"),
    Workflow("cargo-fmt", "either", "sed -i 's/^pub enum Either<L, R> {$/pub enum Either<L,R>{/' src/lib.rs && cargo fmt"),
    Workflow("cargo-clippy", "either", "cargo clippy"),
    # Python: the sdist's test suite, with the user's Python.
    Workflow("pytest", "six", "python -m pytest -q"),
    Workflow("pytest-fails", "six",
             "printf '\\n\\ndef test_fidelity_fails():\\n    assert six.PY2\\n' >> test_six.py && python -m pytest -q",
             note="a test suite that fails: live, it leaves .pytest_cache/ saying so and exits 1"),
    Workflow("pip-install", "six-venv", ".venv/bin/pip install -q pytest==8.3.4", network="registry",
             note="the project's venv; its pip.conf names the stand-in index"),
    # make, and git with a pre-commit hook that runs the tests.
    Workflow("make", "six-git", "make"),
    Workflow("git-commit", "six-git", "git add README.rst && git commit -q -m 'README: a note'"),
    Workflow("git-branch", "six-git",
             "git switch -q -c feature/notes && printf 'notes\\n' > NOTES.txt && git add NOTES.txt && git commit -q -m 'Add notes'"),
    Workflow("git-rebase", "six-git", "git rebase -q --autostash main topic"),
    Workflow("git-stash", "six-git", "git stash push -q -m wip && git stash list > stash-list.txt"),
    # npm: the package's own tests, installs and npx from the stand-in registry.
    Workflow("npm-test", "line-reporter", "npm test"),
    Workflow("npm-ci", "npm-app", "npm ci", network="registry"),
    Workflow("npx", "npm-app", "npx --yes semver@7.6.3 --range '^7.0.0' 7.6.3 > semver-check.txt", network="registry"),
    # The host's loopback service, and a tool's cache in the home.
    Workflow("loopback-service", "six", SERVICE_CLIENT, network="service"),
    Workflow("home-cache", "six-tool", CACHE_WRITER, check="cache"),
]

BY_NAME = {w.name: w for w in WORKFLOWS}


def select(names=None):
    if names:
        unknown = [n for n in names if n not in BY_NAME]
        if unknown:
            raise SystemExit(f"unknown workflow(s): {', '.join(unknown)} (known: {', '.join(BY_NAME)})")
        return [BY_NAME[n] for n in names]
    return list(WORKFLOWS)
