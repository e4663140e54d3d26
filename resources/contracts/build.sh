#!/usr/bin/env bash
# Rebuild the contract artifacts (ABI + bytecode) with solc-js from the npm registry:
#   resources/contracts/SwarmCoordinator.json        the coordinator the app deploys (0.6.0 interface)
#   tests/data/coordinators/SwarmCoordinatorV04*.json the older public interfaces, for the client's tests
# Usage: bash resources/contracts/build.sh   (needs node >= 18 and npm; installs solc into a temp folder)
# Set SOLC_NODE_MODULES to a folder that already holds solc@$SOLC_VERSION to skip the install.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
SOLC_VERSION=0.8.28
modules="${SOLC_NODE_MODULES:-}"
if [ -z "$modules" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund "solc@$SOLC_VERSION" >/dev/null)
  modules="$work/node_modules"
fi
export NODE_PATH="$modules"
node "$here/compile.js" "$here/SwarmCoordinator.sol" "SwarmCoordinator=$here/SwarmCoordinator.json"
tests="$repo/tests/data/coordinators"
node "$here/compile.js" "$here/LegacyCoordinators.sol" \
  "SwarmCoordinatorV042=$tests/SwarmCoordinatorV042.json" "SwarmCoordinatorV043=$tests/SwarmCoordinatorV043.json"
