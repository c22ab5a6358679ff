#!/usr/bin/env bash
# `make e2e-cuda` — NOT in CI. Builds the real torch 2.9.1 + CUDA 12.8 runtime image (tests/e2e/h100-cu128-debian12.yaml)
# on a bootstrapped Debian 12 base with CUDA libraries only from PyPI wheels (~4 GB download), runs the smoke suite
# in it (GPU checks skip with their reason on a host without a GPU), and prints size vs floor and the copies of each
# CUDA library found in the image.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
matrix=tests/e2e/h100-cu128-debian12.yaml
out="${E2E_OUT:-reports/e2e-cuda}"
ca="${CA_CERT:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}"
mkdir -p "$out"

imagebuild validate --matrix "$matrix"
imagebuild build --matrix "$matrix" --ca-cert "$ca" --plain --report-dir "$out" --log-dir "$out/logs"
imagebuild test --matrix "$matrix" --only '*-runtime' --report-dir "$out" --junit "$out/junit" || echo "smoke: failures (see above)"

read -r runtime base < <(imagebuild plan --matrix "$matrix" --ca-cert "$ca" --json | python -c '
import json, sys
tags = {i["flavor"]: i["tag"] for i in json.load(sys.stdin)}
print(tags["runtime"], tags["base"])')
python bench/bench_build.py --size-only "$runtime=$base"

echo "== CUDA library copies in $runtime (every file, site-packages and system paths) =="
docker run --rm --network none --entrypoint /bin/sh "$runtime" -c \
  'for lib in libcudnn.so libnccl.so libcublas.so libcudart.so; do
     n=$(find / -xdev -name "${lib}*" -type f 2>/dev/null | wc -l); echo "$lib: $n file(s)";
     find / -xdev -name "${lib}*" -type f 2>/dev/null | sed "s/^/    /"; done' | tee "$out/cuda-libs.txt"
