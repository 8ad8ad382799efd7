#!/usr/bin/env bash
# Installs the npm side of the end-to-end tests into .e2e/node_modules (gitignored):
# the reference MCP servers (filesystem, memory, everything), the MCP Inspector, and
# Node 22 for the Inspector (the `node` package, from the npm registry like the rest).
#
# Versions are pinned in scripts/e2e-deps/package.json and locked in package-lock.json;
# `npm ci` installs exactly that lock. A stamp holding the lock's hash makes a second run a
# no-op (well under a second), so `make run` and the test fixture can call this every time.
# The last line printed on stdout is the absolute path of the node_modules folder.
#
#   bash scripts/e2e-deps.sh            # install if needed, print the path
#   E2E_DIR=/elsewhere bash scripts/e2e-deps.sh
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
spec="$root/scripts/e2e-deps"
target="${E2E_DIR:-$root/.e2e}"
modules="$target/node_modules"
stamp="$target/.installed"

log() { echo "e2e-deps: $*" >&2; }

command -v npm >/dev/null || { log "npm not found: install Node.js (>= 20) with npm"; exit 1; }
mkdir -p "$target"

wanted="$(cat "$spec/package.json" "$spec/package-lock.json" | sha256sum | cut -d' ' -f1)"
entries=(
  "@modelcontextprotocol/server-everything/dist/index.js"
  "@modelcontextprotocol/server-filesystem/dist/index.js"
  "@modelcontextprotocol/server-memory/dist/index.js"
  "@modelcontextprotocol/inspector/clients/launcher/build/index.js"
  ".bin/node"
)

installed() {
  [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]] || return 1
  for entry in "${entries[@]}"; do [[ -e "$modules/$entry" ]] || return 1; done
  [[ "$("$modules/.bin/node" --version 2>/dev/null)" == v22.* ]]
}

# One installer at a time (make run and a test run may start together).
exec 9>"$target/.lock"
flock -w 600 9 || { log "timed out waiting for another install ($target/.lock)"; exit 1; }

if installed; then
  log "already installed ($modules)"
else
  log "installing pinned MCP servers, Inspector and Node 22 into $modules"
  rm -f "$stamp"
  cp "$spec/package.json" "$spec/package-lock.json" "$target/"
  # The host Node may be 20: the Inspector's engine warnings are expected, it runs on Node 22.
  (cd "$target" && npm ci --no-audit --no-fund --loglevel=error --engine-strict=false) >&2
  for entry in "${entries[@]}"; do
    [[ -e "$modules/$entry" ]] || { log "missing after install: $modules/$entry"; exit 1; }
  done
  echo "$wanted" >"$stamp"
  log "installed (node for the Inspector: $("$modules/.bin/node" --version))"
fi
echo "$modules"
