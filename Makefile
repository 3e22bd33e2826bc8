# `make demo` and `make test` each do all set-up on a fresh machine, then run.
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO := demo-out
# Test processes (pytest-xdist; files stay whole on one process, so module fixtures are built once). JOBS=0: serial.
JOBS ?= 2

.PHONY: setup demo test lint clean

$(STAMP): pyproject.toml constraints.txt scripts/setup.sh
	bash scripts/setup.sh

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/roboreel demo $(DEMO)

# The default suite: `slow` sweeps and `slurm` are deselected (CI runs them: .ci/run); tests/integration needs the
# real LeRobot in its own venv (.ci/ci_lerobot.sh).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(JOBS) --dist loadfile tests --ignore=tests/integration

lint: $(STAMP)
	$(BIN)/ruff check roboreel tests scripts benchmarks .ci

clean:
	rm -rf $(DEMO) build .pytest_cache
