PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Two stamps: what the tests need (the package with its test extra) and what the demo needs (the package alone).
# The first includes the second, so installing it refreshes both; either is redone when pyproject.toml changes.
STAMP := $(VENV)/.installed
RUNTIME := $(VENV)/.installed-runtime

.DEFAULT_GOAL := install
.PHONY: install test test-unit demo docs bench soak lint typecheck clean chromium release smoke-benches smoke-soak

$(BIN)/python:
	@echo "Creating the virtual environment $(VENV) and upgrading its pip"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "Installing kubenexus-gang-admission with its test extra (pytest, mypy, ruff, kubectl, mkdocs, ...) into $(VENV)"
	$(BIN)/pip install --quiet --progress-bar off -e '.[test]'
	touch $(RUNTIME) $(STAMP)

$(RUNTIME): pyproject.toml | $(BIN)/python
	@echo "Installing kubenexus-gang-admission, its runtime dependencies and kubectl into $(VENV) (pip's progress follows)"
	$(BIN)/pip install -e '.[kubectl]'
	touch $(RUNTIME)

# `make`: everything the tests, the docs and the walkthrough use, installed into $(VENV); nothing run.
install: $(STAMP)

# The Python packages and Chromium at once (-j2: their downloads overlap), then the checks.
test:
	@$(MAKE) --no-print-directory -j2 $(STAMP) chromium
	@$(MAKE) --no-print-directory typecheck
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 3 --dist loadfile
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $$(mktemp -d)
	@$(MAKE) --no-print-directory -j2 --output-sync=target smoke-benches smoke-soak

# The benchmarks' smokes check that every code path runs (no figure is judged but the admission's API reads): the
# soak beside the others, each group's output kept together.
smoke-benches: $(STAMP)
	$(BIN)/python bench/admission_bench.py --smoke
	$(BIN)/python bench/webhook_floor_bench.py --smoke
	$(BIN)/python bench/cluster_bench.py --smoke
	$(BIN)/python bench/controller_bench.py --smoke
	$(BIN)/python bench/owner_cache_bench.py --smoke

smoke-soak: $(STAMP)
	$(BIN)/python bench/soak.py --smoke

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -m unit

bench: $(STAMP)
	$(BIN)/python bench/admission_bench.py
	$(BIN)/python bench/webhook_floor_bench.py
	$(BIN)/python bench/cluster_bench.py
	$(BIN)/python bench/controller_bench.py
	$(BIN)/python bench/owner_cache_bench.py

soak: $(STAMP)
	$(BIN)/python bench/soak.py --race 16
	$(BIN)/python bench/soak.py

demo: $(RUNTIME)
	$(BIN)/kubenexus demo

# The documentation site (mkdocs.yml, docs/) into site/; strict: a broken link or a page not in the navigation fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: $(STAMP) typecheck
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict --follow-imports=silent gang controller workloads
	$(BIN)/mypy kube webhook certs kubenexus cluster tools

# Headless Chromium draws the gang timeline in tests/test_timeline_browser.py: installed with apt-get when missing
# (root only); without it that test fails and says so.
chromium:
	@if command -v $${CHROMIUM:-chromium} >/dev/null; then :; \
	elif [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "chromium: missing, and only root with apt-get can install it here: the timeline browser test will fail"; \
	else \
	  log=$$(mktemp); start=$$(date +%s); echo "chromium: installing with apt-get (log: $$log)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  if { apt-get install -y --no-install-recommends chromium || \
	       { apt-get update && apt-get install -y --no-install-recommends chromium; }; } >$$log 2>&1; \
	  then echo "chromium: installed in $$(( $$(date +%s) - start ))s"; \
	  else tail -5 $$log; echo "chromium: apt-get failed: the timeline browser test will fail"; fi; \
	fi

# dist/kubenexus-gang-admission*.yaml: one manifest per variant of deploy/, the image pinned to IMAGE:<version>
# (pyproject.toml's), for `kubectl apply --server-side -f` (tools/release.py).
IMAGE ?= kubenexus-gang-admission
release: $(STAMP)
	$(BIN)/python -m tools.release --image $(IMAGE)

clean:
	rm -rf $(VENV) .pytest_cache dist site
