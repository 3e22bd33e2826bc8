# `make demo` and `make test` each do all set-up on a fresh machine, then run.
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO := demo-out

.PHONY: setup demo test lint clean

$(STAMP): pyproject.toml constraints.txt scripts/setup.sh
	bash scripts/setup.sh

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/roboreel demo $(DEMO)

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

lint: $(STAMP)
	$(BIN)/ruff check roboreel tests scripts

clean:
	rm -rf $(DEMO) build .pytest_cache
