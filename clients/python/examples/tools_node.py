"""A LangGraph-style `tools_node` whose shell tool goes through dryrun.

Each `shell` tool call of the last AI message is rehearsed by the dryrun
daemon under the graph's declared intent; a run whose decision is promote
is promoted (exactly the reviewed change set goes live) and its output
becomes the tool message; a blocked run's evidence becomes the tool
message, so the model can correct itself; a run that needs approval
becomes the graph's interrupt: the graph pauses until a person approved
it (`dryrun approve RUN_ID`), then resumes and promotes it.

With LangGraph installed, `interrupt` is `langgraph.types.interrupt`;
without it, a stand-in exception with the same payload is raised, so the
node runs in a plain loop too (see tests/test_client.py).
"""
from __future__ import annotations

from typing import Any, Dict, List

from dryrun_client import Client, Envelope, Intent, Run

try:  # pragma: no cover - optional
    from langgraph.types import interrupt  # type: ignore
except ImportError:  # pragma: no cover
    class Interrupted(Exception):
        def __init__(self, value: Dict[str, Any]):
            super().__init__(value)
            self.value = value

    def interrupt(value: Dict[str, Any]) -> Any:
        raise Interrupted(value)


def evidence(run: Run) -> str:
    lines = [f"dryrun run {run.run_id}: {run.decision}"]
    if run.changes:
        lines.append("changes: " + ", ".join(f"{c.kind} {c.path}" for c in run.changes[:10]))
    if run.surprise_paths:
        lines.append("surprise paths: " + ", ".join(run.surprise_paths))
    if run.forbidden_paths_touched:
        lines.append("forbidden paths touched: " + ", ".join(run.forbidden_paths_touched))
    lines += run.reasons
    lines += ["what to change: " + h for h in run.to_change]
    # What a terminal would have shown, so the model can fix the command.
    lines.append("output:" if run.output else "output: none")
    if run.output:
        lines.append(run.output.rstrip("\n"))
    lines.append(f"exit status: {run.exit_code if run.signal is None else 'signal %d' % run.signal}")
    return "\n".join(lines)


def make_tools_node(client: Client, workspace: str, intent: Intent):
    def tools_node(state: Dict[str, Any]) -> Dict[str, List[Dict[str, Any]]]:
        out = []
        for call in state["messages"][-1].get("tool_calls", []):
            if call["name"] != "shell":
                continue
            run_id = (state.get("approved_runs") or {}).get(call["id"])
            run = client.run(run_id) if run_id else client.execute(
                Envelope(command=call["args"]["command"], working_dir=workspace, intent=intent))
            if run.state == "awaiting_approval" and run.decision != "blocked":
                # Pauses the graph; resumed after a person's decision. A
                # blocked run also waits for a person (an override), but
                # the model gets its evidence now to correct the command.
                interrupt({"run_id": run.run_id, "tool_call_id": call["id"], "evidence": evidence(run)})
            if run.decision == "promote" or run.state == "approved":
                run = client.promote(run.run_id)
                content = run.output
            else:
                content = evidence(run)
            out.append({"role": "tool", "tool_call_id": call["id"], "content": content,
                        "run_id": run.run_id, "state": run.state})
        return {"messages": out}

    return tools_node
