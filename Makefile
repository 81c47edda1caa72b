# gpuclass developer commands. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# mypy reads the source under its installed name, gpuclass.*: a folder of links maps it.
TYPECHECK := build/typecheck/gpuclass
# Line and branch coverage of gpuclass.* ([tool.coverage] in pyproject.toml): the lines and
# branches left out are printed, and a total under fail_under fails the run (docs/testing.md).
COVERAGE := --cov --cov-report=term-missing:skip-covered

.DEFAULT_GOAL := help
.PHONY: help venv system-deps demo test test-fast lint format types fixtures controlplane bench clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip > $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	$(BIN)/pip install -e '.[test]' >> $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	touch $(STAMP)

venv: $(STAMP) ## create .venv with gpuclass and its test tools

$(TYPECHECK):
	mkdir -p $(TYPECHECK)
	for p in shared webhook reconciler; do ln -sfn ../../../$$p $(TYPECHECK)/$$p; done

demo: $(STAMP) ## run the offline CLI on examples/: status, explain, then sample reviews
	@echo "== gpuclass status --objects examples   (JSON summarised as a table)"
	@$(BIN)/gpuclass status --objects examples | $(BIN)/python examples/show_status.py
	@echo "== gpuclass explain example-reserved-gpu --objects examples   (why 0 free)"
	@$(BIN)/gpuclass explain example-reserved-gpu --objects examples || true
	@echo "== gpuclass explain example-whole-gpu --count 4 --objects examples"
	@$(BIN)/gpuclass explain example-whole-gpu --count 4 --objects examples || true
	@for f in examples/reviews/*.json; do \
	  echo "== gpuclass review -o text --objects examples --vgpu-entitled $$f"; \
	  $(BIN)/gpuclass review -o text --objects examples --vgpu-entitled $$f; \
	done
	@for f in examples/manifests/*.yaml; do \
	  echo "== gpuclass review --manifest -o text --objects examples --vgpu-entitled $$f"; \
	  $(BIN)/gpuclass review --manifest -o text --objects examples --vgpu-entitled $$f; \
	done
	@echo "== gpuclass validate examples/catalog"
	@$(BIN)/gpuclass validate examples/catalog && echo "catalog is valid"
	@$(BIN)/python examples/propose_change.py build/proposed-catalog
	@echo "== gpuclass plan --objects examples --objects tests/fixtures/usage build/proposed-catalog   (maxCount 1, a new model, a class removed)"
	@$(BIN)/gpuclass plan --objects examples --objects tests/fixtures/usage build/proposed-catalog || echo "(exit $$?: the plan holds a refusal)"

system-deps: ## install system tools the tests use (Debian prometheus for promtool) when missing
	@command -v promtool >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian package prometheus (promtool, prometheus)"; \
	    (apt-get install -y -q prometheus >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q prometheus >/dev/null)); \
	  else echo "promtool missing: install the prometheus package (alert tests will be skipped)"; fi; }

# Test worker processes (pytest-xdist), whole files per worker: docs/testing.md, "Parallel run".
TEST_WORKERS ?= 4

test: $(STAMP) system-deps $(TYPECHECK) ## install what the tests need, lint, type-check and run every test with coverage and its floor (what CI runs)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy
	KUBEBUILDER_ASSETS="$$(bash tests/controlplane/build.sh)" $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(COVERAGE)

test-fast: $(STAMP) ## the tests that need no control plane
	$(BIN)/python -m pytest -m "not controlplane"

lint: $(STAMP) ## ruff lint and format check, the import contracts (lint-imports), one name per class
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q -p no:randomly --no-cov tests/project/test_names.py

format: $(STAMP) ## apply ruff's formatting and safe fixes
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

types: $(STAMP) $(TYPECHECK) ## mypy --strict
	$(BIN)/mypy

fixtures: $(STAMP) ## regenerate golden responses (review the diff)
	$(BIN)/python tests/fixtures/build_requests.py
	$(BIN)/python -m pytest -q tests/test_golden.py --update-fixtures

controlplane: ## build (or reuse) kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, etcd and kwok from their Go modules
	bash tests/controlplane/build.sh

bench: $(STAMP) ## print the benchmark figures (needs wrk for the webhook one; the scale run ~15 min)
	$(BIN)/python benchmarks/bench_decision.py
	$(BIN)/python benchmarks/bench_status.py
	$(BIN)/python benchmarks/bench_plan.py
	$(BIN)/python benchmarks/bench_reconciler.py
	$(BIN)/python benchmarks/bench_webhook.py
	$(BIN)/python benchmarks/bench_attack.py
	$(BIN)/python benchmarks/bench_admission_overhead.py
	$(BIN)/python benchmarks/bench_e2e_reconciler.py
	$(BIN)/python benchmarks/bench_reconciler_memory.py
	$(BIN)/python benchmarks/bench_scale_e2e.py

clean: ## remove the virtualenv, caches and every build output (not the control-plane cache)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .coverage .coverage.* build dist *.egg-info
	find . -name __pycache__ -type d -prune -not -path './.git/*' -exec rm -rf {} +
