# imagebuild — common tasks. `make help` lists them.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
WHEELHOUSE ?= $(or $(PIP_FIND_LINKS),/opt/wheels)
CA_CERT ?= $(or $(PIP_CERT),/etc/ssl/certs/ca-certificates.crt)
MATRIX ?= images/cpu.yaml

.PHONY: help install system-deps modern-engine cosign devcontainer-cli lint test test-all test-unit record-probe-results test-integration build-cpu render-check bench e2e-cuda e2e-loop-cuda e2e-zstd-cuda e2e-cuda13-dev e2e-h100 e2e-gh200 e2e-layers binfmt clean

help:
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

system-deps: ## Debian packages the engine, bootstrap and registry tests need (idempotent)
	scripts/system-deps.sh

modern-engine: ## dockerd 26.1 + buildx 0.13.1 from Debian trixie, verified, into .tools/ (the BuildKit backend)
	scripts/modern-engine.sh install

cosign: ## cosign 2.5 from Debian trixie, verified the same way, into .tools/bin/ (push --sign-key, imagebuild verify)
	scripts/cosign.sh install

devcontainer-cli: ## @devcontainers/cli on Node 24 from npm, integrity-pinned, into .tools/ (the devcontainer tests)
	scripts/devcontainer-cli.sh install

$(BIN)/imagebuild: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: system-deps modern-engine cosign devcontainer-cli $(BIN)/imagebuild ## Install system packages and the tool into .venv

lint: $(BIN)/imagebuild ## ruff, render --check of every shipped matrix, mypy (scripts/lint.sh; make test runs it too)
	scripts/lint.sh

test-unit: $(BIN)/imagebuild ## Unit tests on every core (no engine; the few that run a real torch are left to make test)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -p no:cacheprovider -n $(JOBS) -m "not torch" tests/unit

JOBS ?= 2

test: install ## What CI runs: linters, unit tests, integration tests on private engines and a real registry (docs/testing.md)
	scripts/run-tests.sh

test-all: install binfmt ## make test plus the full tier: every bench in quick mode, arm64 under QEMU, bootstraps, fresh engines
	IMAGEBUILD_TIER=all scripts/run-tests.sh

# build-cpu's engine: the dockerd 26.1 `make install` provides, started once under ENGINE_DIR and reused after
ENGINE_DIR ?= /var/tmp/imagebuild-engine

build-cpu: install ## The main job on this machine: build the CPU matrix through BuildKit (the backend auto picks on dockerd 26.1)
	eval "$$(scripts/modern-engine.sh --fresh $(ENGINE_DIR))" && $(BIN)/imagebuild build --matrix $(MATRIX) \
	  --wheelhouse $(WHEELHOUSE) --ca-cert $(CA_CERT) --torch-index-url none --test

# the probe results tests/unit/test_smoke_recorded.py replays to the smoke suite, recorded from the real CPU images on a
# fresh engine of their own; the full tier fails when a fresh run drifts from them (tests/integration/test_probe_recordings.py)
RECORD_ENGINE ?= /var/tmp/imagebuild-record-engine

record-probe-results: install ## Re-record tests/fixtures/probe-results/ from the real CPU images (fresh engine; ~20 min here)
	eval "$$(scripts/modern-engine.sh --fresh $(RECORD_ENGINE))" \
	  && PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/imagebuild build --matrix images/cpu.yaml --wheelhouse $(WHEELHOUSE) \
	    --ca-cert $(CA_CERT) --torch-index-url none --plain \
	  && $(BIN)/python scripts/record_probe_results.py --matrix images/cpu.yaml; \
	  rc=$$?; scripts/modern-engine.sh --stop $(RECORD_ENGINE); rm -rf $(RECORD_ENGINE); exit $$rc

render-check: $(BIN)/imagebuild
	for m in images/*.yaml; do $(BIN)/imagebuild render --matrix $$m --check || exit 1; done

bench: install ## Every benchmark for real (an hour: builds on fresh engines; tables, not tests). make test-all: scripts/bench-quick.sh
	$(BIN)/python bench/bench_resolve.py
	$(BIN)/python bench/bench_te.py --matrix images/h100.yaml
	eval "$$(scripts/docker-engine.sh)" \
	  && $(BIN)/imagebuild build --matrix $(MATRIX) --wheelhouse $(WHEELHOUSE) --ca-cert $(CA_CERT) --torch-index-url none \
	    --plain --report-dir reports/bench-cpu \
	  && $(BIN)/python bench/bench_noop.py --matrix $(MATRIX) --wheelhouse $(WHEELHOUSE) --ca-cert $(CA_CERT) \
	    --markdown bench/noop-cpu.md \
	  && $(BIN)/python bench/bench_build.py --matrix $(MATRIX) --wheelhouse $(WHEELHOUSE) --ca-cert $(CA_CERT) \
	  && $(BIN)/python bench/e2e_table.py --report reports/bench-cpu/build-report.json \
	  && $(BIN)/python bench/bench_push.py && $(BIN)/python bench/bench_registry_cache.py \
	  && $(BIN)/python bench/bench_repro.py --matrix $(MATRIX) --wheelhouse $(WHEELHOUSE) --ca-cert $(CA_CERT) \
	    --torch-index-url none \
	  && $(BIN)/python bench/bench_export.py --matrix $(MATRIX) --only runtime \
	  && $(BIN)/python bench/bench_smoke.py --matrix $(MATRIX) --wheelhouse $(WHEELHOUSE) --ca-cert $(CA_CERT) \
	    --markdown bench/smoke-cpu.md
	eval "$$(scripts/modern-engine.sh --fresh /var/tmp/imagebuild-bench-bk)" \
	  && $(BIN)/python bench/bench_buildkit.py --wheelhouse $(WHEELHOUSE) --ca-cert $(CA_CERT) \
	  && $(BIN)/python bench/bench_zstd.py --wheelhouse $(WHEELHOUSE) --ca-cert $(CA_CERT); \
	  rc=$$?; scripts/modern-engine.sh --stop /var/tmp/imagebuild-bench-bk; rm -rf /var/tmp/imagebuild-bench-bk; exit $$rc
	$(BIN)/python bench/bench_loop.py --baseline $(LOOP_BASELINE) --wheelhouse $(WHEELHOUSE) --ca-cert $(CA_CERT) \
	  --pull-runs 3
	$(BIN)/python bench/bench_pull.py --quick  # its real figures: bench_loop's pull rows; by hand: bench_pull.py REF

# the incremental loop's side-by-side baseline (bench/bench_loop.py): the main this loop's work started from
LOOP_BASELINE ?= 463f54f
# the CUDA loop: NOW only by default (one side: ~32 GB of disk at its peak and 14 minutes here, bench/loop-cuda.md); LOOP_CUDA_BASELINE=REF adds one
LOOP_CUDA_BASELINE ?= none

e2e-loop-cuda: install ## NOT in CI: bench_loop's table for the CUDA 13 runtime (torch from PyPI, fresh engines of its own)
	$(BIN)/python bench/bench_loop.py --baseline $(LOOP_CUDA_BASELINE) --matrix tests/e2e/cu130-dev-debian12.yaml \
	  --wheelhouse '' --ca-cert $(CA_CERT) --no-flat --keep-reports reports/e2e-loop-cuda

e2e-cuda: install ## NOT in CI: real torch 2.9.1+cu128 runtime image from PyPI wheels (~4 GB download)
	eval "$$(scripts/docker-engine.sh)" && scripts/e2e-cuda.sh

e2e-zstd-cuda: install ## NOT in CI: bench_zstd's rows for the CUDA 13 runtime (torch 2.13.0+cu130 amd64 from PyPI)
	eval "$$(IMAGEBUILD_TOOLS_DIR=$(CURDIR)/.tools scripts/modern-engine.sh --fresh /var/tmp/imagebuild-zstd-cuda)" \
	  && $(BIN)/python bench/bench_zstd.py --matrix tests/e2e/gh200-emulated.yaml --platform linux/amd64 \
	    --wheelhouse '' --ca-cert $(CA_CERT); \
	  rc=$$?; scripts/modern-engine.sh --stop /var/tmp/imagebuild-zstd-cuda; rm -rf /var/tmp/imagebuild-zstd-cuda; exit $$rc

e2e-cuda13-dev: install ## NOT in CI: torch 2.13.0+cu130 base/runtime/dev with nvcc from PyPI, smoke-tested
	eval "$$(scripts/docker-engine.sh)" && $(BIN)/imagebuild build --matrix tests/e2e/cu130-dev-debian12.yaml \
	  --ca-cert $(CA_CERT) --plain --report-dir reports/e2e-cuda13 --test

e2e-h100: install ## NOT in CI: images/h100.yaml as shipped (Ubuntu bootstrap, TE compiled once), smoke + table
	eval "$$(scripts/docker-engine.sh)" && scripts/e2e-h100.sh

e2e-layers: install ## NOT in CI: the CPU runtime's environment layers, the same diff IDs from two fresh BuildKit engines
	eval "$$(IMAGEBUILD_TOOLS_DIR=$(CURDIR)/.tools scripts/modern-engine.sh --fresh /var/tmp/imagebuild-layers)" \
	  && IMAGEBUILD_BUILDKIT_HOST="$$DOCKER_HOST" IMAGEBUILD_BUILDKIT_DOCKER_CONFIG="$$DOCKER_CONFIG" \
	    IMAGEBUILD_WHEELHOUSE=$(WHEELHOUSE) IMAGEBUILD_CA_CERT=$(CA_CERT) \
	    $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/e2e/e2e_env_layers.py; \
	  rc=$$?; scripts/modern-engine.sh --stop /var/tmp/imagebuild-layers; rm -rf /var/tmp/imagebuild-layers; exit $$rc

binfmt: ## Register QEMU 10 (trixie's qemu-user, verified) as the aarch64 handler (F flag): linux/arm64 builds/tests here
	scripts/binfmt.sh

e2e-gh200: install binfmt ## NOT in CI: images/gh200.yaml (no TE) amd64 + arm64 under QEMU on a BuildKit engine, smoke
	eval "$$(IMAGEBUILD_TOOLS_DIR=$(CURDIR)/.tools scripts/modern-engine.sh --fresh /var/tmp/imagebuild-gh200)" \
	  && $(BIN)/imagebuild build --matrix tests/e2e/gh200-emulated.yaml --ca-cert $(CA_CERT) --plain \
	    --report-dir reports/e2e-gh200 --test \
	  && $(BIN)/python bench/e2e_table.py --report reports/e2e-gh200/build-report.json; \
	  rc=$$?; scripts/modern-engine.sh --stop /var/tmp/imagebuild-gh200; rm -rf /var/tmp/imagebuild-gh200; exit $$rc

clean:
	rm -rf $(VENV) .pytest_cache reports out
