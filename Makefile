# coshare: the two set-up commands of the README, and the pieces they are made of.
#   make demo   set up .venv and run the main job on the bundled example (no cluster needed)
#   make test   install the test dependencies, run ruff, mypy, build the docs site strict, and the
#               whole suite
#   make bench  the benchmark grid into bench/results/grid.json and docs/benchmarks.md
# Integration tests start a real Slurm cluster and HTCondor pool with deploy/ (root, apt).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint typecheck docs-site unit bench clean man docs dist

$(VENV)/.base: pyproject.toml
	@scripts/ensure-venv $(PYTHON) $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[planner]'
	@touch $@

$(VENV)/.test: pyproject.toml
	@scripts/ensure-venv $(PYTHON) $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test,planner,bound,condor,slurm,nvml]'
	@touch $@ $(VENV)/.base

demo: $(VENV)/.base
	$(BIN)/coshare demo

lint: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.test
	$(BIN)/mypy

unit: $(VENV)/.test
	$(BIN)/pytest tests/unit tests/contract

test: lint typecheck docs-site
	$(BIN)/python scripts/run_tests.py

# The benchmark grid (bench/grid.py) into bench/results/grid.json, then the docs pages'
# tables from that file. BENCH_ARGS passes options: --quick (a smaller subset), --sections
# plan,alibaba,gate,slurm, --timeout S (per plan case), --slurm-lock FILE.
bench: $(VENV)/.test
	$(BIN)/python bench/grid.py $(BENCH_ARGS)
	$(BIN)/python bench/results_page.py

# Man pages from the command line's own help and the config, into man/ (committed; the wheel
# installs them under share/man: MANPATH=man man coshare here).
man: $(VENV)/.test
	$(BIN)/python -m coshare.cli.reference man man

# docs/cli.md, docs/config.md and docs/environment.md from the code (a test checks they are up to date).
docs: $(VENV)/.base
	$(BIN)/python -m coshare.cli.reference docs docs

# The documentation site from docs/ (mkdocs.yml) into site/; strict: a broken link or anchor
# fails it.
docs-site: $(VENV)/.test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# A release: dist/coshare-VERSION.tar.gz and the wheel (docs/install.md; CHANGELOG.md).
dist: $(VENV)/.base
	$(BIN)/python -m pip install -q --disable-pip-version-check build
	rm -rf dist
	$(BIN)/python -m build

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis build dist site
