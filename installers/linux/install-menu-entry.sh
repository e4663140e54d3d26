#!/bin/sh
# Adds RL Swarm to your application menu (for the tarball; the .deb does this itself).
# Run it from the unpacked folder: ./install-menu-entry.sh   (./install-menu-entry.sh --remove undoes it)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
apps="${XDG_DATA_HOME:-$HOME/.local/share}/applications"
icons="${XDG_DATA_HOME:-$HOME/.local/share}/icons/hicolor"
if [ "${1:-}" = "--remove" ]; then
  rm -f "$apps/rl-swarm-desktop.desktop" "$icons"/*/apps/rl-swarm-desktop.png "$icons/scalable/apps/rl-swarm-desktop.svg"
  echo "removed RL Swarm from the menu"
  exit 0
fi
mkdir -p "$apps"
for png in "$here"/icons/app-*.png; do
  size=$(basename "$png" .png | cut -d- -f2)
  mkdir -p "$icons/${size}x${size}/apps"
  cp "$png" "$icons/${size}x${size}/apps/rl-swarm-desktop.png"
done
mkdir -p "$icons/scalable/apps"
cp "$here/icons/app.svg" "$icons/scalable/apps/rl-swarm-desktop.svg"
sed "s|^Exec=.*|Exec=\"$here/rl-swarm\"|" "$here/rl-swarm-desktop.desktop" > "$apps/rl-swarm-desktop.desktop"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q "$apps" || true
echo "RL Swarm is in your application menu (runs $here/rl-swarm)"
