#!/usr/bin/env bash
# Builds "RL Swarm.app" for Apple silicon (arm64) and packs it into a drag-to-Applications .dmg:
#   dist/rl-swarm-desktop-<version>-macos-arm64.dmg
# Signing and notarization take their identities from the environment; with none set the app is signed ad hoc
# (runs on this Mac; on others Gatekeeper asks the user to allow it in System Settings > Privacy & Security).
#   MACOS_SIGN_IDENTITY   "Developer ID Application: Your Name (TEAMID)", in the login keychain
#   MACOS_NOTARY_PROFILE  a profile saved with `xcrun notarytool store-credentials`, or instead
#   APPLE_ID, APPLE_TEAM_ID, APPLE_APP_PASSWORD (an app-specific password)
# MPS: the node sets PYTORCH_ENABLE_MPS_FALLBACK=1 (node/cli/main.py; also in Info.plist's LSEnvironment), so ops that
# Apple's GPU back-end lacks run on the CPU instead of failing; torch uses MPS on macOS 12.3+ (LSMinimumSystemVersion).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(uname -s)/$(uname -m)" = Darwin/arm64 ] || { echo "build on an Apple silicon Mac (arm64)" >&2; exit 1; }
start=$(date +%s)
py=$(bash installers/build-env.sh | tail -n 1)
"$py" -m pip install -q --no-deps --force-reinstall .
version=$("$py" -c 'import importlib.metadata as m; print(m.version("rl-swarm-desktop"))')
work=build/installers
rm -rf "$work/dist" "$work/dmg"
TRL_EXPERIMENTAL_SILENCE=1 "$py" -m PyInstaller --noconfirm --log-level WARN \
  --distpath "$work/dist" --workpath "$work/work" installers/pyinstaller/rl-swarm.spec
app="$work/dist/RL Swarm.app"
[ -x "$app/Contents/Frameworks/hivemind/hivemind_cli/p2pd" ] || { echo "p2pd is not in the app" >&2; exit 1; }

# Sign inside-out: every Mach-O file (libraries, p2pd, the executable), then the bundle that seals them.
identity="${MACOS_SIGN_IDENTITY:--}"
sign() { codesign --force --timestamp --options runtime --entitlements installers/macos/entitlements.plist \
  --sign "$identity" "$@"; }
[ "$identity" = - ] && sign() { codesign --force --sign - "$@"; }
find "$app/Contents" -type f \( -perm -u+x -o -name '*.so' -o -name '*.dylib' \) -print0 |
  while IFS= read -r -d '' file; do file -b "$file" | grep -q Mach-O && sign "$file"; done
sign "$app"
codesign --verify --deep --strict "$app"

# Self-test of the built app before packing it (headless; the node and p2pd start from inside the app).
"$app/Contents/MacOS/rl-swarm" --self-test

mkdir -p "$work/dmg" dist
cp -R "$app" "$work/dmg/"
ln -s /Applications "$work/dmg/Applications"
dmg="dist/rl-swarm-desktop-$version-macos-arm64.dmg"
rm -f "$dmg"
hdiutil create -volname "RL Swarm" -srcfolder "$work/dmg" -fs HFS+ -format UDZO -ov "$dmg"
if [ "$identity" != - ]; then
  codesign --force --timestamp --sign "$identity" "$dmg"
  if [ -n "${MACOS_NOTARY_PROFILE:-}" ]; then
    xcrun notarytool submit "$dmg" --keychain-profile "$MACOS_NOTARY_PROFILE" --wait
    xcrun stapler staple "$dmg"
  elif [ -n "${APPLE_ID:-}" ]; then
    xcrun notarytool submit "$dmg" --apple-id "$APPLE_ID" --team-id "$APPLE_TEAM_ID" \
      --password "$APPLE_APP_PASSWORD" --wait
    xcrun stapler staple "$dmg"
  else
    echo "not notarized: set MACOS_NOTARY_PROFILE or APPLE_ID/APPLE_TEAM_ID/APPLE_APP_PASSWORD" >&2
  fi
fi
echo "built in $(( $(date +%s) - start )) s: $dmg ($(du -h "$dmg" | cut -f1)), app $(du -sh "$app" | cut -f1)"
