# Two commands on a fresh machine: `make demo` and `make test` (README).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Byte-compile the project's own modules as pip does for a regular install: an editable install
# leaves them to be compiled on first import, and where PYTHONDONTWRITEBYTECODE is set (as on the
# machines this project runs on) every process, each joblib worker included, compiles them again
# (about 50 ms of a 0.3 s start-up). Python ignores a compiled file older than its source.
BYTECODE := $(BIN)/python -m compileall -q simulator spaces palm_search

.PHONY: demo test fuzz bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BYTECODE)
	$(BIN)/palm-search optimize --model T-145B --hw wafer

# The suite runs in as many processes as the machine has cores, at most 4 (pytest-xdist), each
# test file whole in one process (a file's module fixtures, e.g. its PostgreSQL server, start once).
test: $(STAMP)
	$(BYTECODE)
	$(BIN)/python -m pytest -n auto --maxprocesses 4 --dist loadfile

fuzz: $(STAMP)
	$(BYTECODE)
	FUZZ_CASES=2000 $(BIN)/python -m pytest -s tests/palm_search/test_fuzz.py

bench: $(STAMP)
	$(BYTECODE)
	$(BIN)/python benchmarks/start_up.py
	$(BIN)/python benchmarks/simulator_speed.py
	$(BIN)/python benchmarks/datacenter_scale.py
	$(BIN)/python benchmarks/moe_targets.py --skip-search
	$(BIN)/python benchmarks/simulator_instructions.py
	$(BIN)/python benchmarks/serving.py
	$(BIN)/python benchmarks/steady_state.py
	$(BIN)/python benchmarks/search_speed.py
	$(BIN)/python benchmarks/fidelity.py
	$(BIN)/python benchmarks/search_quality.py
	$(BIN)/python benchmarks/codesign_search.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy simulator spaces

clean:
	rm -rf $(VENV) build *.egg-info
