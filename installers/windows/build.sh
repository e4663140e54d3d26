#!/usr/bin/env bash
# Builds the Windows installer (run in Git Bash on Windows x64; the release workflow does):
#   dist/rl-swarm-desktop-<version>-windows-x64-setup.exe
# Needs Inno Setup 6 (ISCC; override its path with ISCC=...) and the Linux tarball from installers/linux/build.sh
# at dist/rl-swarm-desktop-linux-x86_64.tar.gz: the app runs its node from it inside WSL2 (README, "Windows").
set -euo pipefail
cd "$(dirname "$0")/../.."
tarball=dist/rl-swarm-desktop-linux-x86_64.tar.gz
[ -f "$tarball" ] || { echo "missing $tarball (the Linux bundle the app runs in WSL2)" >&2; exit 1; }
py=$(bash installers/build-env.sh | tail -n 1)
"$py" -m pip install -q --no-deps --force-reinstall .
version=$("$py" -c 'import importlib.metadata as m; print(m.version("rl-swarm-desktop"))')
rm -rf build/installers/dist
TRL_EXPERIMENTAL_SILENCE=1 "$py" -m PyInstaller --noconfirm --log-level WARN \
  --distpath build/installers/dist --workpath build/installers/work installers/pyinstaller/rl-swarm.spec
MSYS_NO_PATHCONV=1 "${ISCC:-C:/Program Files (x86)/Inno Setup 6/ISCC.exe}" /Q "/DAppVersion=$version" \
  installers/windows/rl-swarm.iss
ls -l dist/*windows-x64-setup.exe
