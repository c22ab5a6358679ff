#!/usr/bin/env bash
# `make e2e-h100` — NOT in CI. Builds images/h100.yaml as shipped: every image this machine can build (Ubuntu 24.04
# bases bootstrapped from the Ubuntu archive, the torch 2.9.1 + CUDA 12.8 runtime with transformer_engine compiled
# once into the wheel cache); images whose sources do not answer here (the PyTorch index for cu130 and 2.7.1+cu128,
# NVIDIA's apt repository for CUDA 12 dev) are named before anything builds and skipped (--keep-going). Smoke-tests
# what was built and prints the table (bench/e2e_table.py). Needs ~25 GB of free disk (two torch installs: the
# runtime image and its build cache, the TE build stage); clean up with IMAGEBUILD_E2E_CLEAN=1.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
matrix=images/h100.yaml
out="${E2E_OUT:-reports/e2e-h100}"
ca="${CA_CERT:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}"
mkdir -p "$out"
echo "== disk before: $(df -h --output=avail / | tail -1) free"
imagebuild validate --matrix "$matrix"
start=$(date +%s)
imagebuild build --matrix "$matrix" --ca-cert "$ca" --keep-going --plain --test \
  --report-dir "$out" --log-dir "$out/logs" || echo "== build: not every image was built (see the error lines above)"
echo "== build + smoke: $(( $(date +%s) - start )) s; disk after: $(df -h --output=avail / | tail -1) free"
python bench/e2e_table.py --report "$out/build-report.json" --markdown "$out/e2e-table.md"
python bench/bench_te.py --matrix "$matrix"
if [[ "${IMAGEBUILD_E2E_CLEAN:-0}" == 1 ]]; then
  python - "$out/build-report.json" <<'PY'
import json, subprocess, sys
for row in json.load(open(sys.argv[1]))["images"]:
    if row.get("image_id"):
        subprocess.run(["docker", "rmi", "-f", row["tag"]], capture_output=True)
PY
  docker image prune -f >/dev/null
fi
