PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-unit demo bench soak lint typecheck clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

test: $(STAMP) typecheck
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q
	$(BIN)/python bench/admission_bench.py --smoke
	$(BIN)/python bench/cluster_bench.py --smoke
	$(BIN)/python bench/controller_bench.py --smoke
	$(BIN)/python bench/owner_cache_bench.py --smoke
	$(BIN)/python bench/soak.py --smoke

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -m unit

bench: $(STAMP)
	$(BIN)/python bench/admission_bench.py
	$(BIN)/python bench/cluster_bench.py
	$(BIN)/python bench/controller_bench.py
	$(BIN)/python bench/owner_cache_bench.py

soak: $(STAMP)
	$(BIN)/python bench/soak.py --race 16
	$(BIN)/python bench/soak.py

demo: $(STAMP)
	$(BIN)/kubenexus demo

lint: $(STAMP) typecheck
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict --follow-imports=silent gang controller workloads
	$(BIN)/mypy kube webhook certs kubenexus cluster

clean:
	rm -rf $(VENV) .pytest_cache
