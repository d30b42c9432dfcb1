"""The model behind Claude Code in the interop tests: an Anthropic Messages mock scripted by the
prompt, so that Claude Code itself (not a test client) calls deputy's tools.

A prompt holds one `CALL <tool> <json arguments>` line per tool call; the model calls them one
after another as `mcp__deputy__<tool>`, a `$session_id` in the arguments standing for the
session id of the latest tool result that had one. After the last result it answers
`RESULTS <json>`: every tool result it was given, in order (`is_error` and text), so the test
reads what Claude Code handed its model from `claude -p --output-format json`. Any other
request (Claude Code's side requests) is answered `ok`.

Every request is recorded, and checked against the API's rules (`anthropic_rules`, the Rust
mock's first-party rules): a violation answers 400 `invalid_request_error`, as the API would.
With thinking on (Claude Code turns it on) every answer starts with a signed thinking block,
so Claude Code's tool loop has to send it back unchanged, as the API requires."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anthropic_rules

CALL = re.compile(r"^CALL (\w+) (\{.*\})\s*$", re.MULTILINE)


def sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def blocks(message: dict) -> list:
    content = message.get("content", "")
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def text_of(block: dict) -> str:
    content = block.get("content", "")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if part.get("type") == "text")
    return str(content)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        length = int(self.headers.get("content-length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        self.server.requests.append(request)  # type: ignore[attr-defined]
        problem = anthropic_rules.violation(request)
        if problem is not None:
            self.server.violations.append(problem)  # type: ignore[attr-defined]
            body = json.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": problem}}).encode()
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.stream(request, self.answer(request))

    @staticmethod
    def answer(request: dict) -> dict:
        """`{"text": ...}` or `{"tool": name, "input": {...}, "id": ...}` for this request."""
        messages = request.get("messages", [])
        scripted = any(tool.get("name", "").startswith("mcp__deputy__") for tool in request.get("tools", []))
        prompt = "".join(block.get("text", "") for block in blocks(messages[0])) if messages else ""
        steps = CALL.findall(prompt) if scripted else []
        if not steps:
            return {"text": "ok"}
        results = [block for message in messages if message.get("role") == "user"
                   for block in blocks(message) if block.get("type") == "tool_result"]
        if len(results) < len(steps):
            name, arguments = steps[len(results)]
            session_id = None
            for result in results:
                found = re.search(r'"session_id"\s*:\s*"([0-9a-f-]{36})"', text_of(result))
                session_id = found.group(1) if found else session_id
            arguments = arguments.replace("$session_id", session_id or "none")
            return {"tool": f"mcp__deputy__{name}", "input": json.loads(arguments), "id": f"toolu_cc_{len(results) + 1}"}
        told = [{"is_error": bool(result.get("is_error")), "text": text_of(result)} for result in results]
        return {"text": "RESULTS " + json.dumps(told)}

    def stream(self, request: dict, answer: dict) -> None:
        usage = {"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
        events = [sse("message_start", {"type": "message_start", "message": {
            "id": "msg_cc", "type": "message", "role": "assistant", "content": [], "model": request.get("model", "m"),
            "stop_reason": None, "stop_sequence": None, "usage": usage}})]
        index = 0
        if (request.get("thinking") or {}).get("type") in ("enabled", "adaptive"):
            thought = f"Next: {answer.get('tool', 'the answer')}."
            events += [
                sse("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {"type": "thinking", "thinking": ""}}),
                sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "thinking_delta", "thinking": thought}}),
                sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                    "type": "signature_delta", "signature": anthropic_rules.thinking_signature(thought)}}),
                sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ]
            index = 1
        if "tool" in answer:
            events += [
                sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                    "type": "tool_use", "id": answer["id"], "name": answer["tool"], "input": {}}}),
                sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(answer["input"])}}),
            ]
            stop = "tool_use"
        else:
            events += [
                sse("content_block_start", {"type": "content_block_start", "index": index,
                                            "content_block": {"type": "text", "text": ""}}),
                sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                            "delta": {"type": "text_delta", "text": answer["text"]}}),
            ]
            stop = "end_turn"
        events += [
            sse("content_block_stop", {"type": "content_block_stop", "index": index}),
            sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                  "usage": {"output_tokens": 6}}),
            sse("message_stop", {"type": "message_stop"}),
        ]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        for event in events:
            self.wfile.write(event)
        self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 (Claude Code may probe; nothing here)
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:  # quiet
        pass


def start() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.requests = []  # type: ignore[attr-defined]
    server.violations = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
