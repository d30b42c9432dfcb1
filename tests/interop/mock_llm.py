"""A tiny Anthropic Messages mock for the interop tests, written independently of deputy's
Rust mock: every POST to .../v1/messages answers one streamed text reply, byte for byte in
the wire format (message_start, a text block in two deltas, message_delta, message_stop).

A few prompts script more: `sleep N ...` answers after N seconds (a long turn); `write PATH`
calls `write_file` on PATH and `read PATH` calls `read_file` on it (a tool turn); the request
after a tool result answers `done: ` and the start of that result."""

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        length = int(self.headers.get("content-length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        self.server.requests.append(request)  # type: ignore[attr-defined]
        last = request["messages"][-1]["content"][-1]
        prompt = last.get("text", "")
        tool = None
        if last.get("type") == "tool_result":
            content = last.get("content", "")
            if isinstance(content, list):
                content = "".join(block.get("text", "") for block in content)
            prompt = f"done: {str(content)[:20]}"
        elif (match := re.match(r"(write|read) (\S+)", prompt)) is not None:
            tool = (f"{match.group(1)}_file", {"path": match.group(2), "content": "approved"}
                    if match.group(1) == "write" else {"path": match.group(2)})
        elif (match := re.match(r"sleep (\d+)", prompt)) is not None:
            time.sleep(int(match.group(1)))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        usage = {"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
        start = sse("message_start", {"type": "message_start", "message": {
            "id": "msg_mock", "type": "message", "role": "assistant", "content": [], "model": request["model"],
            "stop_reason": None, "stop_sequence": None, "usage": usage}})
        if tool is not None:
            name, arguments = tool
            # One tool call per prompt: its id is unique within the session.
            tool_id = f"toolu_{len(request['messages'])}"
            events = [
                start,
                sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
                    "type": "tool_use", "id": tool_id, "name": name, "input": {}}}),
                sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(arguments)}}),
                sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
                sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use",
                                                                         "stop_sequence": None},
                                      "usage": {"output_tokens": 6}}),
                sse("message_stop", {"type": "message_stop"}),
            ]
            for event in events:
                self.wfile.write(event)
            self.wfile.flush()
            self.close_connection = True
            return
        events = [
            start,
            sse("content_block_start", {"type": "content_block_start", "index": 0,
                                        "content_block": {"type": "text", "text": ""}}),
            sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "text_delta", "text": "You said: "}}),
            sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "text_delta", "text": prompt}}),
            sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
            sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                  "usage": {"output_tokens": 6}}),
            sse("message_stop", {"type": "message_stop"}),
        ]
        try:
            for event in events:
                self.wfile.write(event)
                self.wfile.flush()
        except OSError:  # the turn was interrupted while the answer slept
            pass
        self.close_connection = True

    def log_message(self, *args) -> None:  # quiet
        pass


def start() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.requests = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
