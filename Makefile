# One command to set up and run, one to set up and test. See README.md and docs/.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check

.PHONY: setup setup-dev run test lint format bench clean

$(BIN)/python:
	@echo ">> creating a virtual environment in $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# `make run`: the server and the client the README's example uses (the `client` extra).
$(BIN)/.installed-run: pyproject.toml | $(BIN)/python
	@echo ">> installing Lakeshare with the client extra (first run: a minute or two)"
	$(PIP) install --progress-bar on -e '.[client]'
	touch $@

# `make test`: the development toolchain as well (it includes the client extra).
$(BIN)/.installed-dev: pyproject.toml | $(BIN)/python
	@echo ">> installing Lakeshare with the development toolchain (first run: a few minutes)"
	$(PIP) install --progress-bar on -e '.[dev]'
	touch $@ $(BIN)/.installed-run

setup: $(BIN)/.installed-run
setup-dev: $(BIN)/.installed-dev

# Extra arguments for the server, e.g. make run ARGS="--port 9000".
ARGS ?=

run: setup
	$(BIN)/lakeshare serve $(ARGS)

test: setup-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mkdocs build --strict --quiet
	$(BIN)/python -m pytest

lint: setup-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mkdocs build --strict --quiet
	$(BIN)/deptry .

format: setup-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .lakeshare .cache build site *.egg-info .pytest_cache .ruff_cache
