"""`dryrun mcp` through the official MCP Python SDK client: execute one
command, then show and wait for its run; prints the three structured
results as one JSON object for tests/agent_loop_output.rs. argv: dryrun
binary, workspace, state directory, command, and then the program and
arguments that start the server as the identity under test (empty: this
process's own)."""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

BIN, WS, STATE, COMMAND = sys.argv[1:5]
PREFIX = sys.argv[5:]


async def main():
    argv = PREFIX + [BIN, "mcp"]
    params = StdioServerParameters(
        command=argv[0], args=argv[1:],
        env={"DRYRUN_LOCAL": "1", "DRYRUN_STATE_DIR": STATE, "PATH": "/usr/bin:/bin"},
    )
    report = {}
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()

            async def call(name, args):
                res = await s.call_tool(name, args)
                if res.is_error:
                    raise SystemExit(f"{name}: {[c.text for c in res.content]}")
                return res.structured_content

            run = await call("execute", {
                "command": COMMAND, "working_dir": WS, "expected_writes": ["out/**"]})
            report["execute"] = run
            report["show"] = await call("show", {"run_id": run["run_id"]})
            report["wait"] = await call("wait", {"run_id": run["run_id"], "timeout_s": 1,
                                                 "state": "queued"})
    print(json.dumps(report))


asyncio.run(main())
