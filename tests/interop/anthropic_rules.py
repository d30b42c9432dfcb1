"""What the Anthropic Messages API refuses (400 `invalid_request_error`), for the Python mocks:
the first-party rules of deputy's Rust mock (tests/common/provider_rules.rs), where each rule
cites the reports it was confirmed by, in the same order and wording. `violation(body)` is
`None` for a request the API would take."""

import hashlib
import re

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
THINKING_TAIL = ("When `thinking` is enabled, a final `assistant` message must start with a thinking block "
                 "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include "
                 "thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult "
                 "our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking")


def thinking_signature(thinking: str) -> str:
    """The signature a mock issues for a thinking block with this text: bound to the text, as
    real signatures are, so a block sent back edited or with another's signature is caught."""
    return hashlib.sha256(f"deputy-mock-thinking\n{thinking}".encode()).hexdigest()


def blocks(message: dict) -> list:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def kind(block: dict) -> str:
    return block.get("type", "")


def text_block(block: dict, place: str) -> str | None:
    text = block.get("text", "")
    if not text:
        return f"{place}: text content blocks must be non-empty"
    if not text.strip():
        return f"{place}: text content blocks must contain non-whitespace text"
    return None


def tool_names(tools: list) -> str | None:
    seen = set()
    for index, tool in enumerate(tools):
        name = tool.get("name", "")
        if tool.get("type") in (None, "custom") and not TOOL_NAME.match(name):
            return f"tools.{index}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
        if name in seen:
            return "tools: Tool names must be unique."
        seen.add(name)
    return None


def thinking_parameters(body: dict) -> str | None:
    thinking = body.get("thinking") or {}
    if thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens", 0)
        if budget < 1024:
            return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        if budget >= body.get("max_tokens", 0):
            return "`max_tokens` must be greater than `thinking.budget_tokens`."
    if (body.get("tool_choice") or {}).get("type") in ("any", "tool"):
        return "Thinking may not be enabled when tool_choice forces tool use."
    if body.get("temperature", 1) != 1:
        return "`temperature` may only be set to 1 when thinking is enabled."
    return None


def message_content(messages: list) -> str | None:
    for index, message in enumerate(messages):
        content = message.get("content")
        if not content:
            if index + 1 == len(messages) and message.get("role") == "assistant":
                continue
            return (f"messages.{index}: all messages must have non-empty content except for the optional final "
                    "assistant message")
        for block in blocks(message):
            if kind(block) == "text" and (problem := text_block(block, "messages")):
                return problem
    return None


def tool_pairing(messages: list) -> str | None:
    for index, message in enumerate(messages):
        previous = messages[index - 1] if index > 0 else {}
        asked = [block.get("id") for block in blocks(previous)
                 if previous.get("role") == "assistant" and kind(block) == "tool_use"]
        if message.get("role") == "user":
            for position, block in enumerate(blocks(message)):
                if kind(block) == "tool_result" and block.get("tool_use_id") not in asked:
                    return (f"messages.{index}.content.{position}: unexpected `tool_use_id` found in `tool_result` "
                            f"blocks: {block.get('tool_use_id')}. Each `tool_result` block must have a "
                            "corresponding `tool_use` block in the previous message.")
        if message.get("role") != "assistant":
            continue
        mine = [block.get("id") for block in blocks(message) if kind(block) == "tool_use"]
        if not mine:
            continue
        following = messages[index + 1] if index + 1 < len(messages) else {}
        answers = blocks(following) if following.get("role") == "user" else []
        missing = [use for use in mine if use not in {block.get("tool_use_id") for block in answers
                                                      if kind(block) == "tool_result"}]
        if missing:
            return (f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                    f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block "
                    "in the next message.")
        leading = 0
        for block in answers:
            if kind(block) != "tool_result":
                break
            leading += 1
        if leading < len(mine):
            return (f"messages.{index + 1}: Did not find {len(mine)} `tool_result` block(s) at the beginning of "
                    "this message. Messages following `tool_use` blocks must begin with a matching number of "
                    "`tool_result` blocks.")
    return None


def final_assistant_starts_with_thinking(messages: list) -> str | None:
    if len(messages) < 2:
        return None
    assistant, last = messages[-2], messages[-1]
    last_blocks = blocks(last)
    in_tool_loop = last.get("role") == "user" and last_blocks and kind(last_blocks[0]) == "tool_result"
    if not in_tool_loop or assistant.get("role") != "assistant":
        return None
    first = kind(blocks(assistant)[0]) if blocks(assistant) else ""
    if first in ("thinking", "redacted_thinking"):
        return None
    return (f"messages.{len(messages) - 2}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
            f"`{first}`. {THINKING_TAIL}")


def thinking_signatures(messages: list) -> str | None:
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        for position, block in enumerate(blocks(message)):
            if kind(block) != "thinking":
                continue
            if "signature" not in block:
                return f"messages.{index}.content.{position}.thinking.signature: Field required"
            if block["signature"] != thinking_signature(block.get("thinking", "")):
                return f"messages.{index}.content.{position}: Invalid `signature` in `thinking` block"
    return None


def cache_breakpoints(body: dict) -> str | None:
    marked = [tool for tool in body.get("tools", []) if tool.get("cache_control")]
    system = body.get("system")
    marked += [block for block in (system if isinstance(system, list) else []) if block.get("cache_control")]
    marked += [block for message in body.get("messages", []) for block in blocks(message)
               if block.get("cache_control")]
    count = len(marked) + (1 if body.get("cache_control") else 0)
    if count > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {count}."
    five_minutes = False
    for block in marked:
        ttl = block["cache_control"].get("ttl")
        if ttl in (None, "5m"):
            five_minutes = True
        elif ttl == "1h" and five_minutes:
            return "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block."
    return None


def violation(body: dict) -> str | None:
    tools, messages = body.get("tools", []), body.get("messages", [])
    thinking = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
    system = body.get("system")
    checks = [
        lambda: tool_names(tools),
        lambda: thinking_parameters(body) if thinking else None,
        lambda: next((p for b in (system if isinstance(system, list) else []) if kind(b) == "text"
                      for p in [text_block(b, "system")] if p), None),
        lambda: "messages: first message must use the \"user\" role"
        if messages and messages[0].get("role") != "user" else None,
        lambda: message_content(messages),
        lambda: "Requests which include `tool_use` or `tool_result` blocks must define tools."
        if not tools and any(kind(b) in ("tool_use", "tool_result") for m in messages for b in blocks(m)) else None,
        lambda: tool_pairing(messages),
        lambda: final_assistant_starts_with_thinking(messages) if thinking else None,
        lambda: thinking_signatures(messages),
        lambda: cache_breakpoints(body),
    ]
    for check in checks:
        if (problem := check()) is not None:
            return problem
    return None
