"""Claude Code itself (npm `@anthropic-ai/claude-code`, pinned in run.sh) with deputy, as a new
user sets it up: `claude mcp add deputy -- deputy serve …`, then print mode (`claude -p …
--output-format json --allowedTools mcp__deputy`). Claude Code's model is `claude_code_model`
(scripted by the prompt: it makes Claude Code call deputy's tools); deputy's own model is
`mock_llm`. Nothing here talks to the network. Claude Code's requests (thinking on,
`cache_control`, its tool loop) are held to the API's rules (`anthropic_rules`).

Claude Code 2.1.332 negotiates 2026-07-28 with deputy, declares `elicitation` (form, url) and not
the tasks extension, and sends a progress token with every `tools/call`. Tool search is turned
off (`ENABLE_TOOL_SEARCH=false`): with it on, Claude Code lists MCP tools only after a
`ToolSearch`, which a scripted model does not do."""

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import anthropic_rules
import claude_code_model
import mock_llm

CLAUDE = os.environ["CLAUDE_BIN"]
DEPUTY = os.environ["DEPUTY_BIN"]
HOOK = Path(__file__).with_name("claude_code_elicitation_hook.sh")


@pytest.fixture(scope="module")
def model():
    server = claude_code_model.start()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def llm():
    server = mock_llm.start()
    yield server
    server.shutdown()


class Claude:
    """One user's Claude Code: its own HOME (config, settings) and project directory, which is
    also deputy's workspace."""

    def __init__(self, model, llm, **env):
        self.model = model
        self.home = Path(tempfile.mkdtemp())
        self.project = self.home / "project"
        self.project.mkdir()
        base = {key: value for key, value in os.environ.items()
                if not key.startswith(("ANTHROPIC_", "CLAUDE", "MCP_", "DEPUTY_"))}
        self.env = {**base, "HOME": str(self.home), "ANTHROPIC_API_KEY": "test-key",
                    "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{model.server_address[1]}",
                    "ENABLE_TOOL_SEARCH": "false", "DISABLE_AUTOUPDATER": "1",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", **env}
        deputy_env = {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{llm.server_address[1]}",
                      "ANTHROPIC_API_KEY": "test-key", "DEPUTY_MODEL": "anthropic:claude-mock",
                      "XDG_CONFIG_HOME": str(self.home), "DEPUTY_WORKSPACE": str(self.project),
                      "RUST_LOG": "warn"}
        flags = [flag for key, value in deputy_env.items() for flag in ("-e", f"{key}={value}")]
        added = self.run("mcp", "add", "deputy", *flags, "--", DEPUTY, "serve", "--ephemeral", "--no-daemon")
        assert added.returncode == 0, added.stderr

    def run(self, *args, timeout=120):
        return subprocess.run([CLAUDE, *args], env=self.env, cwd=self.project, capture_output=True, text=True,
                              timeout=timeout)

    def answer_elicitations(self, action: str, decision: str | None = None):
        """An `Elicitation` hook (Claude Code's way to answer a server's form without a human,
        which print mode has not): it answers every form `action` with `decision`."""
        (self.home / ".claude").mkdir(exist_ok=True)
        command = f"{HOOK} {action} {decision or '-'} {self.home / 'elicitations.jsonl'}"
        hooks = {"Elicitation": [{"matcher": "deputy", "hooks": [{"type": "command", "command": command}]}]}
        (self.home / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}))

    def elicitations(self) -> list:
        path = self.home / "elicitations.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []

    def prompt(self, *calls: str, timeout=300) -> list:
        """Print mode with one `CALL` line per tool call; what Claude Code handed its model back
        from each call (`is_error`, text)."""
        done = self.run("-p", "\n".join(calls), "--output-format", "json", "--allowedTools", "mcp__deputy",
                        timeout=timeout)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert not self.model.violations, f"the API would have refused: {self.model.violations}"
        result = json.loads(done.stdout)
        assert not result["is_error"], result
        assert result["result"].startswith("RESULTS "), result["result"]
        return json.loads(result["result"].removeprefix("RESULTS "))


def call(tool: str, **arguments) -> str:
    return f"CALL {tool} {json.dumps(arguments)}"


def structured(told: dict) -> dict:
    assert not told["is_error"], told
    return json.loads(told["text"])


def test_claude_mcp_list_shows_deputy_connected(model, llm):
    listed = Claude(model, llm).run("mcp", "list")
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in listed.stdout.splitlines() if line.startswith("deputy:"))
    assert "Connected" in line and "serve --ephemeral" in line, listed.stdout


def test_the_model_creates_and_continues_a_session_and_reads_an_error_as_one(model, llm):
    claude = Claude(model, llm)
    created, continued, missing = claude.prompt(
        call("session_create", prompt="hello"),
        call("session_turn", session_id="$session_id", prompt="again"),
        call("session_read", session_id="00000000-0000-0000-0000-000000000000"))
    created, continued = structured(created), structured(continued)
    assert (created["status"], created["text"], created["turn"]) == ("completed", "You said: hello", 1)
    assert (continued["session_id"], continued["text"], continued["turn"]) == (created["session_id"], "You said: again", 2)
    assert missing["is_error"] and missing["text"].startswith("SESSION_NOT_FOUND: "), missing


def test_a_turn_longer_than_30_s_comes_back_inline(model, llm):
    """Claude Code sends a progress token and waits (its limits: `MCP_TOOL_TIMEOUT`, default
    ~28 h, and 30 min without progress over stdio), so deputy waits 4 min for it, not 30 s."""
    started = time.monotonic()
    told, = Claude(model, llm).prompt(call("session_create", prompt="sleep 35 then answer"))
    assert time.monotonic() - started >= 35
    created = structured(told)
    assert (created["status"], created["text"]) == ("completed", "You said: sleep 35 then answer")


def test_under_a_short_mcp_tool_timeout_wait_ms_keeps_the_session(model, llm):
    """`MCP_TOOL_TIMEOUT` is a hard limit Claude Code does not extend for progress: past it the
    model gets only a timeout error. A `wait_ms` under it answers `running` with the session."""
    claude = Claude(model, llm, MCP_TOOL_TIMEOUT="8000")
    timed_out, running = claude.prompt(call("session_create", prompt="sleep 15 then answer"),
                                       call("session_create", prompt="sleep 15 again", wait_ms=2000))
    assert timed_out["is_error"] and "timed out after 8s" in timed_out["text"], timed_out
    running = structured(running)
    assert running["status"] == "running" and len(running["session_id"]) == 36, running


@pytest.mark.parametrize("answer", ["allow", "deny", "decline", "none"])
def test_an_approval_is_asked_through_claude_code(model, llm, answer):
    """deputy asks with an MRTR `InputRequiredResult`; print mode answers a server's form only
    through an `Elicitation` hook. Without one (`none`) the call comes back pending."""
    claude = Claude(model, llm)
    if answer in ("allow", "deny"):
        claude.answer_elicitations("accept", answer)
    elif answer == "decline":
        claude.answer_elicitations("decline")
    told, = claude.prompt(call("session_create", prompt="write approved.txt", approval="always"))
    result = structured(told)
    written = (claude.project / "approved.txt").exists()
    if answer != "none":
        form, = claude.elicitations()
        assert form["mcp_server_name"] == "deputy" and form["mode"] == "form", form
        assert "write_file" in form["message"] and "approved.txt" in form["message"], form
        assert form["requested_schema"]["properties"]["decision"]["enum"] == ["allow", "deny"], form
    if answer == "allow":
        assert result["status"] == "completed" and written, result
    elif answer == "deny":
        assert (result["status"], result["text"]) == ("completed", "You said: done: denied by the caller"), result
        assert not written
    else:
        assert result["status"] == "pending_tool_calls" and result["pending"][0]["kind"] == "approval", result
        assert not written


def test_the_model_refuses_what_the_api_refuses():
    """The rules Claude Code's requests pass above do refuse (a sample of them)."""
    thought = {"type": "thinking", "thinking": "t", "signature": anthropic_rules.thinking_signature("t")}
    use = {"type": "tool_use", "id": "toolu_1", "name": "mcp__deputy__session_read", "input": {}}
    answer = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}
    tools = [{"name": "mcp__deputy__session_read", "input_schema": {"type": "object"}}]
    ok = {"max_tokens": 1000, "thinking": {"type": "adaptive"}, "tools": tools, "messages": [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": [thought, use]},
        {"role": "user", "content": [answer]}]}
    assert anthropic_rules.violation(ok) is None
    unanswered = {**ok, "messages": ok["messages"][:2] + [{"role": "user", "content": "next"}]}
    assert "without `tool_result`" in anthropic_rules.violation(unanswered)
    no_thinking = {**ok, "messages": [ok["messages"][0], {"role": "assistant", "content": [use]}, ok["messages"][2]]}
    assert "Expected `thinking`" in anthropic_rules.violation(no_thinking)
    edited = {**ok, "messages": [ok["messages"][0], {"role": "assistant", "content": [{**thought, "thinking": "u"}, use]},
                                 ok["messages"][2]]}
    assert "Invalid `signature`" in anthropic_rules.violation(edited)
    five = {**ok, "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}] * 5}
    assert "maximum of 4" in anthropic_rules.violation(five)
