"""deputy's tools under the OpenAI Agents SDK (PyPI `openai-agents`): every tool of a stdio
deputy's `tools/list`, converted as the SDK converts MCP tools for strict function calling.

For each tool the SDK's own `ensure_strict_json_schema` (with `_reject_open_objects`, as
`MCPUtil.to_function_tool` calls it) must not raise, and `MCPUtil.to_function_tool(...,
convert_schemas_to_strict=True)` must come out strict (the SDK silently falls back to a loose
tool when the conversion fails). Also prints the bytes a model sees of the tool list (name,
description and input schema of each tool). Exits non-zero on any failure.

Usage: DEPUTY_BIN=... python agents_strict.py"""

import asyncio
import copy
import json
import os
import subprocess
import sys
import tempfile

from agents.mcp import MCPServerStdio, MCPUtil
from agents.strict_schema import ensure_strict_json_schema

DEPUTY = os.environ["DEPUTY_BIN"]
BUDGET = 12 * 1024 + 512  # ten session tools in 12 KiB (issue 33), fork and rewind since (issue 28)


def serve_args():
    help_text = subprocess.run([DEPUTY, "serve", "--help"], capture_output=True, text=True).stdout
    return ["serve", "--ephemeral"] + (["--no-daemon"] if "--no-daemon" in help_text else [])


async def main() -> int:
    home = tempfile.mkdtemp()
    env = {key: value for key, value in os.environ.items() if key not in ("DEPUTY_CONFIG", "DEPUTY_STORE")}
    env.update({"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
                "DEPUTY_MODEL": "anthropic:claude-mock", "XDG_CONFIG_HOME": home, "DEPUTY_WORKSPACE": home,
                "RUST_LOG": "warn"})
    failures = 0
    async with MCPServerStdio(params={"command": DEPUTY, "args": serve_args(), "env": env},
                              client_session_timeout_seconds=30) as server:
        tools = await server.list_tools()
        visible = 0
        for tool in tools:
            schema = tool.input_schema
            text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
            visible += len(tool.name.encode()) + len((tool.description or "").encode()) + len(text.encode())
            try:
                ensure_strict_json_schema(copy.deepcopy(schema), _reject_open_objects=True)
            except Exception as error:  # noqa: BLE001 (any failure of the conversion counts)
                failures += 1
                print(f"FAIL {tool.name}: ensure_strict_json_schema: {error}")
                continue
            function_tool = MCPUtil.to_function_tool(tool, server, convert_schemas_to_strict=True)
            if not function_tool.strict_json_schema:
                failures += 1
                print(f"FAIL {tool.name}: the SDK fell back to a non-strict tool")
                continue
            print(f"PASS {tool.name}: strict")
        if len(tools) < 10:
            failures += 1
            print(f"FAIL: only {len(tools)} tools")
        print(f"model-visible tool list: {visible} bytes for {len(tools)} tools (budget {BUDGET})")
        if visible > BUDGET:
            failures += 1
            print(f"FAIL: the tool list costs a model {visible} bytes, over {BUDGET}")
    print(f"agents-strict: {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
