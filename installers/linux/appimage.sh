#!/usr/bin/env bash
# CI recipe: wraps the bundle of installers/linux/build.sh into one double-clickable file,
#   dist/rl-swarm-desktop-<version>-x86_64.AppImage
# appimagetool is downloaded (APPIMAGETOOL_URL overrides where from), so this runs where the internet can be
# reached (the release workflow), not on the offline build machines.
set -euo pipefail
cd "$(dirname "$0")/../.."
url="${APPIMAGETOOL_URL:-https://github.com/AppImage/appimagetool/releases/download/continuous/appimagetool-x86_64.AppImage}"
bundle=build/installers/dist/rl-swarm
[ -x "$bundle/rl-swarm" ] || { echo "run installers/linux/build.sh first" >&2; exit 1; }
version=$(cat build/installers/stage/tar/rl-swarm-desktop/VERSION)
appdir=build/installers/AppDir
rm -rf "$appdir"
mkdir -p "$appdir/usr/lib"
cp -a "$bundle" "$appdir/usr/lib/rl-swarm-desktop"
cp installers/linux/rl-swarm-desktop.desktop "$appdir/"
cp resources/icons/app-256.png "$appdir/rl-swarm-desktop.png"
cat > "$appdir/AppRun" <<'APPRUN'
#!/bin/sh
exec "$(dirname "$(readlink -f "$0")")/usr/lib/rl-swarm-desktop/rl-swarm" "$@"
APPRUN
chmod 755 "$appdir/AppRun"
tool=build/installers/appimagetool
[ -x "$tool" ] || { curl -fsSL -o "$tool" "$url" && chmod 755 "$tool"; }
ARCH=x86_64 "$tool" --appimage-extract-and-run "$appdir" "dist/rl-swarm-desktop-$version-x86_64.AppImage"
