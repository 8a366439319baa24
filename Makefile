# Both targets bootstrap .venv on first use, so a fresh clone needs only Python 3.11+ and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint dev clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/herald demo

dev: $(STAMP)
	$(BIN)/herald dev

test: $(STAMP)
	$(BIN)/pytest -q

# unit and ledger tiers only: no Temporal server at all
test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not workflow and not e2e and not slow"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy domain workflows activities

clean:
	rm -rf $(VENV) .herald
