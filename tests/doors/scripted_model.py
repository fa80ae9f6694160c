#!/usr/bin/env python3
"""A scripted stand-in for a model API on loopback, for driving real agent
hosts offline in tests. Speaks just enough of the Anthropic Messages API
(POST /v1/messages, streamed) for Claude Code and of the OpenAI Responses
API (POST /v1/responses, streamed) for Codex.

The script (argv[2], JSON): {"command": "shell string"} or {"commands":
[...]}. A request whose conversation holds N tool results gets a shell
tool call with the (N+1)th command, one after another; once every command
has its result, a short text answer. Every request
body is appended to argv[3] (JSON lines) so the test can read what the
host sent back (the tool result: the replayed output or the hook's
reason). The chosen port is written to argv[1].
"""
import json
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, SCRIPT, LOG = sys.argv[1], sys.argv[2], sys.argv[3]
_script = json.load(open(SCRIPT))
COMMANDS = _script.get("commands") or [_script["command"]]
LOCK = threading.Lock()


def log(path, body):
    with LOCK, open(LOG, "a") as f:
        f.write(json.dumps({"path": path, "body": body}) + "\n")


def tool_results_anthropic(body):
    n = 0
    for m in body.get("messages", []):
        c = m.get("content")
        if isinstance(c, list):
            n += sum(1 for b in c if isinstance(b, dict) and b.get("type") == "tool_result")
    return n


def offers_tool(body, name):
    return any(t.get("name") == name for t in body.get("tools", []) or [])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {}

    def _json(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events):
        out = b""
        for name, data in events:
            if name:
                out += b"event: " + name.encode() + b"\n"
            out += b"data: " + json.dumps(data).encode() + b"\n\n"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self):
        log(self.path, None)
        if self.path.startswith("/v1/models"):
            return self._json({"data": [], "object": "list"})
        self._json({})

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self):
        body = self._body()
        log(self.path, body)
        path = self.path.split("?")[0]
        if path.endswith("/v1/messages/count_tokens"):
            return self._json({"input_tokens": 10})
        if path.endswith("/v1/messages"):
            return self.anthropic(body)
        if path.endswith("/responses"):
            return self.openai_responses(body)
        self._json({})

    # Anthropic Messages API, streamed.
    def anthropic(self, body):
        done = tool_results_anthropic(body)
        call = offers_tool(body, "Bash") and done < len(COMMANDS)
        command = COMMANDS[done] if call else None
        mid = "msg_" + uuid.uuid4().hex[:12]
        usage = {"input_tokens": 10, "output_tokens": 5}
        start = {
            "type": "message_start",
            "message": {
                "id": mid, "type": "message", "role": "assistant",
                "model": body.get("model", "m"), "content": [],
                "stop_reason": None, "stop_sequence": None, "usage": usage,
            },
        }
        if call:
            block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:12],
                     "name": "Bash", "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(
                {"command": command, "description": "scripted command"})}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": "Done."}
            stop = "end_turn"
        if not body.get("stream"):
            content = dict(block)
            if call:
                content["input"] = json.loads(delta["partial_json"])
            else:
                content["text"] = "Done."
            msg = dict(start["message"], content=[content], stop_reason=stop)
            return self._json(msg)
        self._sse([
            ("message_start", start),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 5}}),
            ("message_stop", {"type": "message_stop"}),
        ])

    # OpenAI Responses API, streamed.
    def openai_responses(self, body):
        items = body.get("input", []) or []
        results = sum(1 for i in items if isinstance(i, dict) and i.get("type") in (
            "function_call_output", "custom_tool_call_output", "local_shell_call_output"))
        done = results >= len(COMMANDS)
        rid = "resp_" + uuid.uuid4().hex[:12]
        tool_names = [t.get("name") for t in body.get("tools", []) or []]
        events = [("response.created", {"type": "response.created",
                                         "response": {"id": rid, "object": "response", "status": "in_progress", "output": []}})]
        if not done:
            name = "exec_command" if "exec_command" in tool_names else "shell"
            command = COMMANDS[results]
            if name == "exec_command":
                args = {"cmd": command}
            else:
                args = {"command": ["bash", "-lc", command]}
            item = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:8],
                    "call_id": "call_" + uuid.uuid4().hex[:8], "name": name,
                    "arguments": json.dumps(args), "status": "completed"}
        else:
            item = {"type": "message", "id": "msg_" + uuid.uuid4().hex[:8], "role": "assistant",
                    "status": "completed", "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}))
        events.append(("response.completed", {"type": "response.completed", "response": {
            "id": rid, "object": "response", "status": "completed", "output": [item],
            "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}}}))
        self._sse(events)


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(PORT_FILE + ".tmp", PORT_FILE)
    srv.serve_forever()


if __name__ == "__main__":
    main()
