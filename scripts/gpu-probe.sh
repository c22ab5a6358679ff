#!/usr/bin/env bash
# Run imagebuild's in-image probe directly on a GPU host (no Docker): prints its JSON, then a short table.
#
#   scripts/gpu-probe.sh [--python PY] [--out FILE] [--perf] [--sections a,b,c] [--timeout S]
#
# PY defaults to $PYTHON, else /opt/venv/bin/python, else python3 (it must have torch for the GPU sections).
# Exit status: 0 when no check failed, 1 when one did, 2 when the probe printed no JSON.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# the directory holding the probe package (probe/): only its files are needed, not an installed imagebuild
pkg_parent="$here/../src/imagebuild/smoke"
[ -f "$pkg_parent/probe/__main__.py" ] || pkg_parent="$(python3 -c 'import os, imagebuild.smoke.probe as p
print(os.path.dirname(os.path.dirname(p.__file__)))' 2>/dev/null || true)"
[ -f "$pkg_parent/probe/__main__.py" ] || { echo "gpu-probe: the probe package (probe/__main__.py) not found" >&2; exit 2; }

py="${PYTHON:-}"
out="gpu-probe.json"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --python) py="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ -z "$py" ]; then
  if [ -x /opt/venv/bin/python ]; then py=/opt/venv/bin/python; else py=python3; fi
fi
case " ${args[*]:-} " in
  *" --sections "*) ;;
  *) args+=(--sections "system,versions,libraries,gpu,tf32,amp,distributed,te") ;;
esac

# the same one-file zipapp the smoke suite ships into containers, built here from the package files
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
probe="$work/probe.pyz"
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$pkg_parent" "$py" -c 'import sys; from probe.pack import build_zipapp; build_zipapp(sys.argv[1])' \
  "$probe" || { echo "gpu-probe: could not build the probe zipapp with $py" >&2; exit 2; }

err="${out%.json}.stderr.log"
set +e
# --host: a bare host, not an image (libraries.one_copy names the copy torch loads instead of failing on any second one)
"$py" "$probe" --host "${args[@]}" --output "$out" 2>"$err" >/dev/null
rc=$?
set -e
if [ ! -s "$out" ]; then
  echo "gpu-probe: no JSON (exit $rc); last stderr lines:" >&2
  tail -n 20 "$err" >&2
  exit 2
fi
cat "$out"
echo
"$py" "$probe" --table "$out"
echo "(JSON: $out, stderr incl. NCCL_DEBUG output: $err)"
"$py" - "$out" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
sys.exit(1 if any(c["status"] == "failed" for c in doc["checks"]) else 0)
PY
