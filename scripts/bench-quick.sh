#!/usr/bin/env bash
# Every bench script in its --quick mode (small inputs, one repetition), so that no bench can rot unnoticed:
# `make test-all` (scripts/run-tests.sh, IMAGEBUILD_TIER=all) runs this after the integration tests, on the engines it
# started; any bench that exits non-zero (a traceback included) fails the run. The figures printed here are not measurements; `make bench` gives those.
#
# What is cheap: the pure benches (resolve, te) need no engine. The ones that need built images share ONE build of
# the smallest thing the project builds, the CPU matrix's base image (`--only base`: bootstrap + base, about a
# minute, or less where the integration tests left the OS image and the base's layers in the engine's cache);
# each bench then does a no-op of it or pushes it (bench_repro compares a two-file image of its own with itself).
# `--no-engine` runs the pure ones only (make test does). A bench added to bench/ must be listed here
# (tests/unit/test_bench_scripts.py checks that every bench/*.py is, and that each has --quick).
#
# Needs: DOCKER_HOST (or the default socket) reaching an engine, Debian's docker CLI and docker-registry, the
# wheelhouse (IMAGEBUILD_WHEELHOUSE or PIP_FIND_LINKS, default /opt/wheels) and the CA bundle (IMAGEBUILD_CA_CERT or
# PIP_CERT). Output: one line per bench with its seconds, then the total.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -x .venv/bin/python ]]; then export PATH="$PWD/.venv/bin:$PATH"; fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
wheelhouse="${IMAGEBUILD_WHEELHOUSE:-${PIP_FIND_LINKS:-/opt/wheels}}"
ca_cert="${IMAGEBUILD_CA_CERT:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}"

work="$(mktemp -d /var/tmp/ib-bench-quick.XXXXXX)"
trap 'rm -rf "$work"' EXIT
export IMAGEBUILD_STATE_DIR="$work/state"  # the record of these builds, never the checkout's .imagebuild/
build=(--matrix images/cpu.yaml --only base --wheelhouse "$wheelhouse" --ca-cert "$ca_cert" --torch-index-url none)

started=$SECONDS
bench() {  # bench NAME COMMAND...: run it, its output under a header; a failure stops the script (set -e)
  local name="$1" t0=$SECONDS; shift
  echo "bench-quick: $name" >&2
  "$@"
  echo "bench-quick: $name ok ($((SECONDS - t0)) s)" >&2
}

# pure: no engine
bench bench_resolve python bench/bench_resolve.py --quick
bench bench_te python bench/bench_te.py --quick
if [[ "${1:-}" == --no-engine ]]; then  # make test: only these (the rest needs built images: make test-all)
  echo "bench-quick: the benches without an engine ran ($((SECONDS - started)) s)" >&2
  exit 0
fi

# the one build the others reuse (a real build on a fresh engine, a no-op on a warm one)
bench "build --only base" imagebuild build "${build[@]}" --plain --report-dir "$work/report"
bench bench_noop python bench/bench_noop.py --quick --only base --wheelhouse "$wheelhouse" --ca-cert "$ca_cert"
bench bench_build python bench/bench_build.py --quick --only base --wheelhouse "$wheelhouse" --ca-cert "$ca_cert" \
  --log-dir "$work/bench-build-logs"
bench e2e_table python bench/e2e_table.py --quick --report "$work/report/build-report.json"
bench bench_repro python bench/bench_repro.py --quick
bench bench_push python bench/bench_push.py --quick
bench bench_registry_cache python bench/bench_registry_cache.py --quick
bench bench_export python bench/bench_export.py --quick  # a generated 24 MB image to .sqsh
bench bench_smoke python bench/bench_smoke.py --quick --wheelhouse "$wheelhouse" --ca-cert "$ca_cert"  # base image
# the BuildKit backend's bench on the modern engine run-tests.sh started (scripts/modern-engine.sh)
if [[ -n "${IMAGEBUILD_BUILDKIT_HOST:-}" ]]; then
  bench bench_buildkit env DOCKER_HOST="$IMAGEBUILD_BUILDKIT_HOST" DOCKER_CONFIG="${IMAGEBUILD_BUILDKIT_DOCKER_CONFIG:-}" \
    python bench/bench_buildkit.py --quick --wheelhouse "$wheelhouse" --ca-cert "$ca_cert"
  # zstd vs gzip delivery: the nodes are fresh 26.1 engines (zstd needs Docker >= 23)
  bench bench_zstd env DOCKER_HOST="$IMAGEBUILD_BUILDKIT_HOST" DOCKER_CONFIG="${IMAGEBUILD_BUILDKIT_DOCKER_CONFIG:-}" \
    python bench/bench_zstd.py --quick --wheelhouse "$wheelhouse" --ca-cert "$ca_cert"
  # the incremental loop (build, test, signed push, a node's pull and start): fresh engines of its own
  bench bench_loop python bench/bench_loop.py --quick --wheelhouse "$wheelhouse" --ca-cert "$ca_cert"
  # a node's pull against its floor, each node setting (an image of its own: no build)
  bench bench_pull python bench/bench_pull.py --quick
else
  echo "bench-quick: error: no BuildKit engine (IMAGEBUILD_BUILDKIT_HOST): bench/bench_buildkit.py --quick not run" >&2
  exit 1
fi

echo "bench-quick: all benches ran ($((SECONDS - started)) s)" >&2
