# Two commands on a fresh machine: `make demo` and `make test` (README).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test fuzz bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/palm-search optimize --model T-145B --hw wafer

test: $(STAMP)
	$(BIN)/python -m pytest

fuzz: $(STAMP)
	FUZZ_CASES=2000 $(BIN)/python -m pytest -s tests/palm_search/test_fuzz.py

bench: $(STAMP)
	$(BIN)/python benchmarks/simulator_speed.py
	$(BIN)/python benchmarks/steady_state.py
	$(BIN)/python benchmarks/search_speed.py
	$(BIN)/python benchmarks/fidelity.py
	$(BIN)/python benchmarks/search_quality.py
	$(BIN)/python benchmarks/codesign_search.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy simulator

clean:
	rm -rf $(VENV) build *.egg-info
