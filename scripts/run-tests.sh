#!/usr/bin/env bash
# The README's test command (`make test`) ends here; .ci/run calls `make test`.
# First the linters (scripts/lint.sh: ruff, shellcheck, `render --check` of every shipped matrix, mypy): any finding
# fails the run before an engine is started or a test runs. Then the integration tests one at a time in a random
# order (the seed in the first and last lines: IMAGEBUILD_TEST_SEED=N repeats it), and beside them, once the
# session's matrix builds have ended and left cores idle, the unit tests on every core (pytest-xdist; their output
# follows the integration tests'). Last, what the run cost the two engines (scripts/engine_counts.py) and each
# phase's seconds. Either kind failing fails the run.
# Tiers (docs/testing.md): IMAGEBUILD_TIER=ci (the default, `make test`, CI) leaves out the tests marked full_tier;
# IMAGEBUILD_TIER=all (`make test-all`) runs them and, last, every bench in its quick mode (scripts/bench-quick.sh).
# Arguments are given to the integration tests' pytest.
# Starts a PRIVATE Docker engine with an empty data-root for this run, so no test can pass on images or build cache
# left by an earlier session; stops it and deletes its data afterwards. IMAGEBUILD_REUSE_ENGINE=1 uses the engine
# DOCKER_HOST (or the default socket) reaches instead — faster while developing, not what CI does.
# A second private engine, dockerd 26.1 with buildx 0.13.1 (scripts/modern-engine.sh), serves the BuildKit backend's
# tests: they find it in IMAGEBUILD_BUILDKIT_HOST (a DOCKER_HOST value) and IMAGEBUILD_BUILDKIT_DOCKER_CONFIG (where
# the buildx plugin is); Debian 12's 20.10 has BuildKit v0.8, too old for them. A set IMAGEBUILD_BUILDKIT_HOST is used
# as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
tier="${IMAGEBUILD_TIER:-ci}"
case "$tier" in
  ci) select=(-m "not full_tier") ;;
  all) select=() ;;
  *) echo "error: run-tests: IMAGEBUILD_TIER=$tier; choices: ci, all" >&2; exit 2 ;;
esac
started=$SECONDS
phases=()
phase() { phases+=("$1 $((SECONDS - ${2:-$started}))s"); }
export PATH="$PWD/.venv/bin:$PATH"
export IMAGEBUILD_WHEELHOUSE="${IMAGEBUILD_WHEELHOUSE:-${PIP_FIND_LINKS:-/opt/wheels}}"
export IMAGEBUILD_CA_CERT="${IMAGEBUILD_CA_CERT:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}"

scripts/lint.sh
phase lint

# what this run started or made, undone on exit in reverse order whatever happens
# (each entry is expanded when it runs, hence single quotes: SC2016 is meant)
undo=()
on_exit() { local i; for ((i=${#undo[@]}-1; i>=0; i--)); do eval "${undo[i]}" || true; done; }
trap on_exit EXIT

# The unit tests (no engine, order-free: each has its own tmp folder and record folder) and the benches that need no
# engine (quick mode; the others run in make test-all) run BESIDE the integration tests, on the cores the session's
# matrix builds leave idle: they wait until those builds have ended (the image provider creates
# $unit_dir/builds-ended; so does this script when the integration tests end first), then run on every core at a
# lower priority, their output kept and shown after the integration tests'. Started here, before the engines are,
# so that they run in the environment they always had (no DOCKER_HOST of the private engines).
# (REQUIRE_ENGINE: a test that cannot make its torch venv fails instead of skipping, as under CI before)
unit_dir="$(mktemp -d /var/tmp/imagebuild-unit.XXXXXX)"
(
  trap - EXIT
  while [[ ! -e "$unit_dir/builds-ended" ]]; do sleep 1; done
  t0=$SECONDS
  rc=0
  IMAGEBUILD_REQUIRE_ENGINE=1 nice -n 10 python -m pytest -q -p no:cacheprovider -n "${IMAGEBUILD_TEST_JOBS:-2}" \
    --durations=20 tests/unit > "$unit_dir/log" 2>&1 || rc=$?
  nice -n 10 scripts/bench-quick.sh --no-engine >> "$unit_dir/log" 2>&1 || rc=$((rc ? rc : 1))
  echo "$rc $((SECONDS - t0))" > "$unit_dir/result"
) &
unit_pid=$!
# shellcheck disable=SC2016
undo+=('kill "$unit_pid" 2>/dev/null; pkill -P "$unit_pid" 2>/dev/null; rm -rf "$unit_dir"')
export IMAGEBUILD_TEST_BUILDS_ENDED="$unit_dir/builds-ended"

if [[ "${IMAGEBUILD_REUSE_ENGINE:-0}" == 1 ]]; then
  eval "$(scripts/docker-engine.sh)"
else
  run_dir="$(mktemp -d /var/tmp/imagebuild-test.XXXXXX)"
  # shellcheck disable=SC2016
  undo+=('scripts/docker-engine.sh --stop "$run_dir"; rm -rf "$run_dir"')
  eval "$(scripts/docker-engine.sh --fresh "$run_dir")"
fi
if [[ -z "${IMAGEBUILD_BUILDKIT_HOST:-}" ]]; then
  bk_dir="$(mktemp -d /var/tmp/imagebuild-bk.XXXXXX)"
  # shellcheck disable=SC2016
  undo+=('scripts/modern-engine.sh --stop "$bk_dir"; rm -rf "$bk_dir"')
  bk_env="$(scripts/modern-engine.sh --fresh "$bk_dir")"
  IMAGEBUILD_BUILDKIT_HOST="$(sed -n 's/^export DOCKER_HOST=//p' <<<"$bk_env")"
  IMAGEBUILD_BUILDKIT_DOCKER_CONFIG="$(sed -n 's/^export DOCKER_CONFIG=//p' <<<"$bk_env")"
fi
export IMAGEBUILD_BUILDKIT_HOST
export IMAGEBUILD_BUILDKIT_DOCKER_CONFIG="${IMAGEBUILD_BUILDKIT_DOCKER_CONFIG:-$(scripts/modern-engine.sh --env | sed 's/^export DOCKER_CONFIG=//')}"
# linux/arm64 under QEMU (tests/integration/test_arm64_emulated.py): trixie's QEMU 10 as the qemu-aarch64 handler, F flag
scripts/binfmt.sh aarch64
export IMAGEBUILD_REQUIRE_ENGINE=1  # a missing engine/tool fails the run instead of skipping tests
# push's compressed-layer cache (push/compress.py) of this run only: no push may pass on blobs an earlier run left
layer_cache="$(mktemp -d /var/tmp/imagebuild-layer-cache.XXXXXX)"
# shellcheck disable=SC2016
undo+=('rm -rf "$layer_cache"')
export IMAGEBUILD_LAYER_CACHE="$layer_cache"
# the integration order's seed, chosen here so that the first and the last lines of the run name it (pytest -q prints
# no header): IMAGEBUILD_TEST_SEED=N make test repeats the order
export IMAGEBUILD_TEST_SEED="${IMAGEBUILD_TEST_SEED:-$(( (RANDOM * 32768 + RANDOM) % 1000000 ))}"
echo "run-tests: integration order IMAGEBUILD_TEST_SEED=$IMAGEBUILD_TEST_SEED" >&2
echo "run-tests: tier $tier; engine at ${DOCKER_HOST:-default socket}; BuildKit engine at $IMAGEBUILD_BUILDKIT_HOST" >&2
# what the two engines do, recorded as it happens (an engine keeps only its last 256 events for a later query);
# counted last, after the recorders stop
events_dir="$(mktemp -d /var/tmp/imagebuild-events.XXXXXX)"
classic_host="${DOCKER_HOST:-unix:///var/run/docker.sock}"
python scripts/engine_counts.py record "$events_dir/classic.jsonl" "$classic_host" &
recorders=("$!")
python scripts/engine_counts.py record "$events_dir/buildkit.jsonl" "$IMAGEBUILD_BUILDKIT_HOST" &
recorders+=("$!")
# shellcheck disable=SC2016
undo+=('rm -rf "$events_dir"; echo "run-tests: tier $tier, IMAGEBUILD_TEST_SEED=$IMAGEBUILD_TEST_SEED, ${phases[*]}, total $((SECONDS - started))s" >&2')
# shellcheck disable=SC2016
undo+=('kill "${recorders[@]}" 2>/dev/null; wait "${recorders[@]}" 2>/dev/null; python scripts/engine_counts.py count "classic=$events_dir/classic.jsonl" "buildkit=$events_dir/buildkit.jsonl" || true')
for _ in $(seq 50); do  # each recorder's first line says its stream is open: no event of the run is missed
  [[ -s "$events_dir/classic.jsonl" && -s "$events_dir/buildkit.jsonl" ]] && break
  sleep 0.2
done
t0=$SECONDS
# the slowest tests by name at the end: where the run's time goes (CI must stay well under its 90 minutes)
integration_rc=0
python -m pytest -q -p no:cacheprovider --durations=40 "${select[@]}" tests/integration "$@" || integration_rc=$?
phase integration "$t0"
touch "$unit_dir/builds-ended"  # a session that never got to signal it
wait "$unit_pid" || true
echo "run-tests: the unit tests and the benches without an engine (beside the integration tests):" >&2
cat "$unit_dir/log"
read -r unit_rc unit_seconds < "$unit_dir/result" || { unit_rc=1; unit_seconds=0; }
phases+=("unit ${unit_seconds}s (beside)")
if (( unit_rc != 0 || integration_rc != 0 )); then
  echo "run-tests: failed: unit tests exit $unit_rc, integration tests exit $integration_rc" >&2
  exit 1
fi
if [[ "$tier" == all ]]; then
  # every bench in --quick mode on these engines, after the tests (which must find the engines empty: the session's
  # build proves its own bootstrap): a bench that crashes fails the run
  t0=$SECONDS
  scripts/bench-quick.sh
  phase bench-quick "$t0"
fi
