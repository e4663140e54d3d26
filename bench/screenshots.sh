#!/usr/bin/env bash
# Screenshots of every screen under a real X server with a window manager and a tray host, at 1600x1000 and
# 1024x700, light and dark, into docs/screenshots/ (needs: apt-get install xvfb openbox trayer).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
OUT=${OUT:-docs/screenshots}
mkdir -p "$OUT"
export DISPLAY=:${SCREEN_DISPLAY:-77}
Xvfb "$DISPLAY" -screen 0 1920x1200x24 -nolisten tcp &
XVFB=$!
trap 'kill $TRAYER $OPENBOX $XVFB 2>/dev/null || true' EXIT
sleep 1
openbox & OPENBOX=$!
trayer --edge top --align right --widthtype request --height 24 & TRAYER=$!
sleep 1
export QT_QPA_PLATFORM=xcb PYTHONPATH=$PWD
for size in 1600x1000 1024x700; do
  "$PYTHON" bench/screenshots.py --out "$OUT" --size "$size"
  "$PYTHON" bench/screenshots.py --out "$OUT" --size "$size" --dark
  "$PYTHON" bench/fleet_screenshot.py --out "$OUT" --size "$size"  # over a real sshd on loopback (root, sshd)
done
