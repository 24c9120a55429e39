PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q
	$(BIN)/python bench/admission_bench.py --smoke

bench: $(STAMP)
	$(BIN)/python bench/admission_bench.py

# Until the local cluster emulator lands, the demo walks the examples through the webhook's
# own decision path offline (`kubenexus explain`, the same code as /mutate).
demo: $(STAMP)
	@for case in "spark-pi-driver spark-pi-objects" "spark-pi-executor spark-pi-objects" \
	             "pytorch-worker pytorch-objects" "batch-job-pod batch-job-objects"; do \
	  set -- $$case; echo "=== examples/$$1.yaml"; \
	  $(BIN)/kubenexus explain --pod examples/$$1.yaml --objects examples/$$2.yaml || exit 1; echo; \
	done

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache
