"""MCP Tasks, approval elicitation and sessions as resources, driven by the official Python MCP
client (PyPI `mcp`) over streamable HTTP and stdio.

The Python client has the generic extension mechanism (SEP-2133: `ClientExtension`, result
claims) but no tasks client, so `Tasks` below is a small hand-written one for SEP-2663: it
advertises `io.modelcontextprotocol/tasks`, claims the `task` result of `tools/call`, and
resolves it by polling `tasks/get`, answering approval input requests through `tasks/update`."""

import asyncio
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Literal

import pytest
from mcp import Client
from mcp.client.extension import ClientExtension, ResultClaim
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult, ElicitResult, Request, RequestParams, Result
from pydantic import ConfigDict

from test_python_client import WORKSPACES, anyio_backend, deputy_env, http_url, llm, serve_args  # noqa: F401 (fixtures)

TASKS = "io.modelcontextprotocol/tasks"
DEPUTY = os.environ["DEPUTY_BIN"]


# ---- the tasks extension (SEP-2663), by hand ----------------------------------------------

class CreatedTask(Result):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    result_type: Literal["task"]
    task_id: str
    status: str


class TaskState(Result):
    """`tasks/get`: the task and, by status, `result`, `error` or `inputRequests`."""
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    task_id: str
    status: str


class TaskParams(RequestParams):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    task_id: str


class TaskRequest(Request[TaskParams, str]):
    name_param = "taskId"  # SEP-2663: tasks/* carry Mcp-Name over HTTP


async def task_request(session, method: str, task_id: str, result_type=TaskState, **fields: Any):
    return await session.send_request(TaskRequest(method=method, params=TaskParams(task_id=task_id, **fields)),
                                      result_type)


async def poll(session, task_id: str, until: set[str]) -> TaskState:
    for _ in range(600):
        state = await task_request(session, "tasks/get", task_id)
        if state.status in until:
            return state
        await asyncio.sleep(0.05)
    raise AssertionError(f"task {task_id} never reached {until}")


class Tasks(ClientExtension):
    """Resolves a task into the tool's result; approvals are answered with `decision`."""
    identifier = TASKS

    def __init__(self, decision: str = "allow"):
        self.decision = decision

    def claims(self):
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

    async def resolve(self, created: CreatedTask, ctx) -> CallToolResult:
        answered = set()
        while True:
            state = await poll(ctx.session, created.task_id, {"input_required", "completed", "failed", "cancelled"})
            if state.status == "completed":
                return CallToolResult.model_validate(state.model_extra["result"])
            if state.status != "input_required":
                raise RuntimeError(f"task {created.task_id} ended {state.status}: {state.model_extra}")
            requests = {key: value for key, value in state.model_extra["inputRequests"].items() if key not in answered}
            responses = {key: {"action": "accept", "content": {"decision": self.decision}} for key in requests}
            answered.update(responses)
            await task_request(ctx.session, "tasks/update", created.task_id, Result, inputResponses=responses)


# ---- where deputy runs ----------------------------------------------------------------------

@pytest.fixture(params=["http", "stdio"])
def server(request, llm, http_url):
    if request.param == "http":
        return http_url
    home = tempfile.mkdtemp()
    WORKSPACES[home] = home
    return StdioServerParameters(command=DEPUTY, args=serve_args(), env=deputy_env(llm, home))


@pytest.fixture
def workspace(server):
    """deputy's workspace (its file tools work there), a fresh directory inside it."""
    root = WORKSPACES[server if isinstance(server, str) else server.env["DEPUTY_WORKSPACE"]]
    return Path(tempfile.mkdtemp(dir=root))


async def raw_call(client: Client, name: str, arguments: dict):
    """`tools/call` without resolving a task: the task itself, or the result."""
    return await client.session.call_tool(name, arguments, allow_claimed=True)


# ---- tasks ----------------------------------------------------------------------------------

@pytest.mark.anyio
async def test_a_slow_turn_is_a_task_and_tasks_get_ends_with_the_full_result(server):
    async with Client(server, read_timeout_seconds=60, extensions=[Tasks()]) as client:
        assert client.protocol_version == "2026-07-28"
        created = await raw_call(client, "session_create", {"prompt": "sleep 3 then answer"})
        assert isinstance(created, CreatedTask), created
        assert created.status == "working"
        session_id = created.meta["deputy/session_id"]
        working = await task_request(client.session, "tasks/get", created.task_id)
        assert working.status == "working" and working.meta["deputy/session_id"] == session_id
        done = await poll(client.session, created.task_id, {"completed"})
        result = done.model_extra["result"]["structuredContent"]
        assert result["status"] == "completed" and result["text"] == "You said: sleep 3 then answer"
        assert result["session_id"] == session_id

        # The extension resolves a task transparently into the tool's result.
        turn = await client.call_tool("session_turn", {"session_id": session_id, "prompt": "sleep 3 more"})
        assert turn.structured_content["text"] == "You said: sleep 3 more"
        assert turn.structured_content["turn"] == 2


@pytest.mark.anyio
async def test_tasks_cancel_interrupts_the_turn(server):
    async with Client(server, read_timeout_seconds=60, extensions=[Tasks()]) as client:
        created = await raw_call(client, "session_create", {"prompt": "sleep 30 forever"})
        assert isinstance(created, CreatedTask), created
        await task_request(client.session, "tasks/cancel", created.task_id, Result)
        ended = await poll(client.session, created.task_id, {"cancelled", "completed", "failed"})
        assert ended.status == "cancelled"
        read = await client.call_tool("session_read", {"session_id": created.meta["deputy/session_id"]})
        assert read.structured_content["state"]["last_turn"]["status"] == "cancelled"


@pytest.mark.anyio
async def test_an_approval_round_trip_through_input_required_and_tasks_update(server, workspace):
    async with Client(server, read_timeout_seconds=60, extensions=[Tasks()]) as client:
        created = await raw_call(client, "session_create",
                                 {"prompt": "write approved.txt", "approval": "always", "workspace": str(workspace)})
        assert isinstance(created, CreatedTask), created
        asking = await poll(client.session, created.task_id, {"input_required"})
        (key, request), = asking.model_extra["inputRequests"].items()
        assert request["method"] == "elicitation/create"
        assert request["params"]["requestedSchema"]["properties"]["decision"]["enum"] == ["allow", "deny"]
        assert not (workspace / "approved.txt").exists()
        await task_request(client.session, "tasks/update", created.task_id, Result,
                           inputResponses={key: {"action": "accept", "content": {"decision": "allow"}}})
        done = await poll(client.session, created.task_id, {"completed"})
        assert done.model_extra["result"]["structuredContent"]["status"] == "completed"
        assert (workspace / "approved.txt").read_text() == "approved"


@pytest.mark.anyio
async def test_a_client_without_the_extension_gets_running_as_before(server):
    async with Client(server, read_timeout_seconds=60) as client:
        result = await client.call_tool("session_create", {"prompt": "sleep 3 please", "wait_ms": 300})
        assert result.structured_content["status"] == "running"
        read = await client.call_tool("session_read",
                                      {"session_id": result.structured_content["session_id"], "wait_ms": 10000})
        assert read.structured_content["state"]["last_turn"]["text"] == "You said: sleep 3 please"


# ---- elicitation (2025-11-25) ---------------------------------------------------------------

def elicitation(action: str, asked: list, decision: str = "allow"):
    async def callback(context, params):
        asked.append(params.message)
        content = {"decision": decision} if action == "accept" else None
        return ElicitResult(action=action, content=content)
    return callback


@pytest.mark.anyio
@pytest.mark.parametrize("action", ["accept", "decline"])
async def test_approvals_are_elicited_from_a_2025_client(server, workspace, action):
    asked = []
    async with Client(server, mode="legacy", read_timeout_seconds=60,
                      elicitation_callback=elicitation(action, asked)) as client:
        assert client.protocol_version == "2025-11-25"
        result = await client.call_tool("session_create",
                                        {"prompt": "write approved.txt", "approval": "always",
                                         "workspace": str(workspace)})
        assert len(asked) == 1 and "write_file" in asked[0]
        if action == "accept":
            assert result.structured_content["status"] == "completed"
            assert (workspace / "approved.txt").read_text() == "approved"
        else:
            assert result.structured_content["status"] == "pending_tool_calls"
            assert result.structured_content["pending"][0]["kind"] == "approval"
            assert not (workspace / "approved.txt").exists()


# ---- elicitation (2026-07-28, MRTR) ---------------------------------------------------------

@pytest.mark.anyio
@pytest.mark.parametrize("answer", ["allow", "deny", "decline", "cancel"])
async def test_approvals_are_asked_through_input_required_on_2026(server, workspace, answer):
    """No tasks extension, elicitation declared: the call answers an `InputRequiredResult`,
    and the client's own MRTR driver asks the callback and retries with the answer."""
    asked = []
    action = "accept" if answer in ("allow", "deny") else answer
    async with Client(server, read_timeout_seconds=60,
                      elicitation_callback=elicitation(action, asked, decision=answer)) as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool("session_create",
                                        {"prompt": "write approved.txt", "approval": "always",
                                         "workspace": str(workspace)})
        assert len(asked) == 1 and "write_file" in asked[0] and "approved.txt" in asked[0]
        created = result.structured_content
        if answer == "allow":
            assert created["status"] == "completed" and created["text"].startswith("You said: done: ")
            assert (workspace / "approved.txt").read_text() == "approved"
        elif answer == "deny":
            assert created["status"] == "completed" and created["text"] == "You said: done: denied by the caller"
            assert not (workspace / "approved.txt").exists()
        else:
            assert created["status"] == "pending_tool_calls"
            assert created["pending"][0]["kind"] == "approval"
            assert not (workspace / "approved.txt").exists()


# ---- sessions as resources ------------------------------------------------------------------

@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")  # legacy mode subscribes on purpose
async def test_sessions_are_resources(server, workspace, mode):
    (workspace / "big.txt").write_text("".join(f"line {n}\n" for n in range(5000)))
    updated = []

    async def on_message(message):
        if getattr(message, "method", None) == "notifications/resources/updated":
            updated.append(str(message.params.uri))

    async with Client(server, mode=mode, read_timeout_seconds=60, cache=None, message_handler=on_message) as client:
        created = await client.call_tool("session_create", {"prompt": "read big.txt", "workspace": str(workspace)})
        session_id = created.structured_content["session_id"]
        state_uri = f"deputy://sessions/{session_id}"
        listed = [str(resource.uri) for resource in (await client.list_resources()).resources]
        assert state_uri in listed and f"{state_uri}/transcript" in listed
        templates = (await client.list_resource_templates()).resource_templates
        assert len(templates) == 5  # four of sessions, deputy://agents/{name}

        state = json.loads((await client.read_resource(state_uri)).contents[0].text)
        assert state["session_id"] == session_id and state["state"]["turns"] == 1
        transcript = (await client.read_resource(f"{state_uri}/transcript")).contents[0].text
        assert transcript.startswith(f"# Session {session_id}") and "## User\n\nread big.txt" in transcript
        tool_use_id = transcript.split("**Tool call** `read_file` (`")[1].split("`")[0]
        output = (await client.read_resource(f"{state_uri}/tool-outputs/{tool_use_id}")).contents[0].text
        assert "line 4999" in output

        if mode == "auto":
            async with client.listen(resource_subscriptions=[state_uri]) as subscription:
                assert state_uri in (subscription.honored.resource_subscriptions or [])
                await client.call_tool("session_turn", {"session_id": session_id, "prompt": "again"})
                event = await asyncio.wait_for(subscription.__anext__(), 10)
                assert getattr(event, "uri", None) == state_uri, event
        else:
            await client.subscribe_resource(state_uri)
            await client.call_tool("session_turn", {"session_id": session_id, "prompt": "again"})
            for _ in range(200):
                if updated:
                    break
                await asyncio.sleep(0.05)
            assert updated == [state_uri]
        read = json.loads((await client.read_resource(state_uri)).contents[0].text)
        assert read["state"]["turns"] == 2
