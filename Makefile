# Two commands for a fresh machine: `make demo` and `make test`. Both create .venv if missing.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: setup demo test lint bench lab labs clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first: the CPU build (a CUDA build is pulled in otherwise, several GB)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

## demo: CartPole GRPO on the default config (progress bar, runs/cartpole/learning_curve.png)
demo: setup
	$(VENV)/bin/grpo-minimal cartpole --out runs/cartpole

## test: unit, property and learning tests, and every notebook under nbval; then the float
## comparisons (marker numerics) again on one thread: another reduction order, as on another CPU.
## The first pass runs on TEST_WORKERS pytest-xdist workers, whole files each (a notebook's cells
## share one kernel); tests/conftest.py splits the threads between them.
TEST_WORKERS ?= 2
test: setup
	GRPO_QUICK=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -m numerics tests

lint: setup
	$(VENV)/bin/ruff check .

bench: setup
	$(PY) bench/cartpole.py
	$(PY) bench/ppo_vs_grpo.py --variants
	$(PY) bench/rewards.py
	$(PY) bench/widgets.py
	$(PY) bench/llm_step.py
	$(PY) bench/prompt_cache.py
	$(PY) bench/ablations.py --completions 12800 --threads 1 --seeds 0 1 2 3 4 --variants notebook07
	$(PY) bench/how_far.py --seeds 0 1
	$(PY) bench/r1_pipeline.py
	$(PY) bench/hedging.py

lab: setup
	$(VENV)/bin/jupyter lab notebooks/

## labs: instructor/labs/*.py -> notebooks/labs/*.ipynb (what learners get) and build/labs/
## (autograder zips with the hidden checks, solution notebooks: the instructor's, not committed)
labs: setup
	$(VENV)/bin/grpo-minimal lab build

clean:
	rm -rf runs .pytest_cache .hypothesis
