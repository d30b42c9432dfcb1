#!/usr/bin/env bash
# Installs llmock (PyPI, pinned), the independent chaos provider of the reliability suite, into
# .ci/cache/llmock, once per version; prints the path of its `llmock` command. Needs python3
# with venv and PyPI. Idempotent: a finished install is marked with `.installed`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
LLMOCK_VERSION=0.2.2
cache="$root/.ci/cache/llmock"
venv="$cache/venv-$LLMOCK_VERSION"
mkdir -p "$cache"
if [ ! -f "$venv/.installed" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  PIP_CACHE_DIR="$cache/pip-cache" timeout 600 "$venv/bin/pip" install --quiet --disable-pip-version-check \
    --default-timeout 60 "llmock==$LLMOCK_VERSION" >&2
  touch "$venv/.installed"
fi
echo "$venv/bin/llmock"
