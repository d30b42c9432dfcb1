"""deputy driven by the official Python MCP client (PyPI `mcp`): all six session tools over
streamable HTTP (mode auto → 2026-07-28, mode legacy → 2025-11-25) and over stdio."""

import os
import socket
import subprocess
import tempfile
import time
import urllib.request

import jsonschema
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

import mock_llm

DEPUTY = os.environ["DEPUTY_BIN"]
# The workspace (and config home) of each HTTP deputy, by its /mcp URL.
WORKSPACES = {}


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def llm():
    server = mock_llm.start()
    yield server
    server.shutdown()


def serve_args():
    """`serve` for a client that starts deputy itself: in memory, and in this process
    (`--no-daemon`) once deputy has a background server to hand the client to."""
    help_text = subprocess.run([DEPUTY, "serve", "--help"], capture_output=True, text=True).stdout
    return ["serve", "--ephemeral"] + (["--no-daemon"] if "--no-daemon" in help_text else [])


def deputy_env(llm, home):
    env = dict(os.environ)
    env.update({
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{llm.server_address[1]}",
        "DEPUTY_MODEL": "anthropic:claude-mock",
        "XDG_CONFIG_HOME": home,
        "DEPUTY_WORKSPACE": home,
        "RUST_LOG": "warn",
    })
    env.pop("DEPUTY_CONFIG", None)
    env.pop("DEPUTY_STORE", None)
    return env


@pytest.fixture(scope="module")
def http_url(llm):
    home = tempfile.mkdtemp()
    # The operator lets token-less loopback callers write (deputy denies it by default: G6):
    # the approval tests write a file through the HTTP deputy, as a local operator would.
    os.makedirs(os.path.join(home, "deputy"))
    with open(os.path.join(home, "deputy", "config.toml"), "w") as config:
        config.write('[policy]\nanonymous_writes = "allow"\n')
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([DEPUTY, "serve", "--ephemeral", "--http", f"127.0.0.1:{port}"],
                               env=deputy_env(llm, home))
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    WORKSPACES[f"http://127.0.0.1:{port}/mcp"] = home
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    assert process.wait(timeout=30) == 0


def error_code(result):
    """The code of an error result, after checking its shape: `isError`, the text `CODE: message`,
    no `structuredContent` (it would not match the tool's outputSchema), and the error body in
    `_meta["deputy/error"]`."""
    assert result.is_error, result
    assert result.structured_content is None, result
    body = result.meta["deputy/error"]
    assert result.content[0].text == f"{body['code']}: {body['message']}"
    return body["code"]


async def drive_all_six_tools(client):
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    for name in ["session_create", "session_turn", "session_interrupt", "session_read", "session_list",
                 "session_archive"]:
        assert name in tools
    # Every schema is valid JSON Schema 2020-12, and every success result matches its tool's
    # outputSchema (the client itself does not check).
    for tool in tools.values():
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)

    async def call(name, arguments):
        result = await client.call_tool(name, arguments)
        if not result.is_error:
            jsonschema.Draft202012Validator(tools[name].output_schema).validate(result.structured_content)
        return result

    created = await call("session_create", {"prompt": "hello", "labels": {"via": "python"}})
    assert not created.is_error, created
    session = created.structured_content
    assert session["status"] == "completed" and session["text"] == "You said: hello"
    session_id = session["session_id"]
    assert session_id in created.content[0].text

    turn = await call("session_turn", {"session_id": session_id, "prompt": "again"})
    assert turn.structured_content["turn"] == 2 and turn.structured_content["text"] == "You said: again"

    read = await call("session_read", {"session_id": session_id})
    assert read.structured_content["state"]["turns"] == 2
    assert read.structured_content["billing"]["usage"]["output_tokens"] == 12

    listed = await call("session_list", {})
    assert session_id in [s["session_id"] for s in listed.structured_content["sessions"]]

    # Comms and the journal: every success result matches its tool's outputSchema, as above.
    sent = await call("session_send", {"session_id": session_id, "message": "a note from Python"})
    assert sent.structured_content["delivered"] == "queued", sent
    mailed = await call("session_turn", {"session_id": session_id, "prompt": "any mail?"})
    assert "a note from Python" in mailed.structured_content["text"], mailed
    events = await call("session_events", {"session_id": session_id, "limit": 500})
    kinds = [stored["event"]["type"] for stored in events.structured_content["events"]]
    assert "inbox_delivered" in kinds and kinds.count("turn_completed") == 3, kinds

    idle = await call("session_interrupt", {"session_id": session_id})
    assert error_code(idle) == "SESSION_NOT_RUNNING"
    assert idle.meta["deputy/error"]["session_id"] == session_id

    wrong = await call("session_turn", {"session_id": 42, "prompt": "x"})
    assert error_code(wrong) == "INVALID_REQUEST"

    archived = await call("session_archive", {"session_id": session_id})
    assert archived.structured_content == {"session_id": session_id, "archived": True}
    gone = await call("session_turn", {"session_id": session_id, "prompt": "x"})
    assert error_code(gone) == "SESSION_NOT_FOUND"


@pytest.mark.anyio
@pytest.mark.parametrize("mode, version", [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
async def test_all_six_tools_over_streamable_http(http_url, mode, version):
    async with Client(http_url, mode=mode, read_timeout_seconds=60) as client:
        assert client.protocol_version == version
        assert client.server_info.name == "deputy"
        await drive_all_six_tools(client)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_all_six_tools_over_stdio(llm, mode):
    home = tempfile.mkdtemp()
    server = StdioServerParameters(command=DEPUTY, args=serve_args(), env=deputy_env(llm, home))
    async with Client(server, mode=mode, read_timeout_seconds=60) as client:
        assert client.server_info.name == "deputy"
        await drive_all_six_tools(client)
