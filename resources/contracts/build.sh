#!/usr/bin/env bash
# Rebuild SwarmCoordinator.json (ABI + bytecode) from SwarmCoordinator.sol with solc-js from the npm registry.
# Usage: bash resources/contracts/build.sh        (needs node >= 18 and npm; installs solc into a temp folder)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
SOLC_VERSION=0.8.28
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund "solc@$SOLC_VERSION" >/dev/null)
NODE_PATH="$work/node_modules" node "$here/compile.js" "$here/SwarmCoordinator.sol" "$here/SwarmCoordinator.json"
echo "wrote $here/SwarmCoordinator.json"
