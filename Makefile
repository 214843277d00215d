# The two commands of the README: `make book` and `make test`.
# Each sets up .venv itself (idempotently) on a machine with Python >= 3.11,
# venv, git and make.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
BUILD := _build
STAMP := $(VENV)/.eigprec-installed
CACHE_KEY_FILE := $(BUILD)/.eigprec-cache-key
JB := $(BIN)/jupyter-book build . --builder html --keep-going

# Progress bars as text in a terminal only, never in a cell output (eigprec_book.helpers.progress);
# kernels found in .venv before any user-level kernelspec.
export EIGPREC_PROGRESS := text
export JUPYTER_PREFER_ENV_PATH := 1
export JUPYTER_PLATFORM_DIRS := 1
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# The Colab check's scale (tools/colab_check.py --quick sets it in its own kernels) never
# reaches a build: pages executed with it would fail their guards.
ifeq ($(strip $(EIGPREC_SCALE)),quick)
$(error EIGPREC_SCALE=quick is the Colab check's scale (tools/colab_check.py --quick); pages built at it fail their guards: unset it)
endif

# Everything that can change what a chapter prints besides its code cells.
# jupyter-cache keys only on code cells (jupyter-book issue 1633), so a change
# here must empty the execution cache.
CACHE_INPUTS := src bookpkg book/data requirements.txt pyproject.toml bookpkg/pyproject.toml

.PHONY: book test env lint unit cache-key strict-book site-check colab-check publish \
	linkcheck notebooks clean help robustness pdf pdf-check pdf-prerequisites

help:
	@echo "make book   execute the chapters (cached) and write $(BUILD)/html"
	@echo "make test   lint, unit tests, execute every chapter, build with warnings as errors,"
	@echo "            check links/offline assets/Colab buttons, every page in headless Chromium,"
	@echo "            and run every reader's notebook as Colab would (one seed, smaller"
	@echo "            grids: the strict build checks the numbers)"
	@echo "make pdf    the book as one PDF, $(BUILD)/pdf/eigen-precision.pdf, from the pages"
	@echo "            make book executed (cached; executes only what is missing), through"
	@echo "            LaTeX; needs TeX Live (make pdf names the packages it lacks)"
	@echo "make pdf-prerequisites  install those packages with apt-get (root or sudo)"
	@echo "make pdf-check  build the PDF and read it back (page count, titles, references,"
	@echo "            figures, boxes, hidden cells): the weekly workflow"
	@echo "make notebooks  the reader's notebooks (Colab, Download) from the executed build,"
	@echo "            into $(BUILD)/notebooks (also run by make book and make publish)"
	@echo "make robustness  execute every page under several arithmetic configurations"
	@echo "            (threads, instruction sets, BLAS path, TF32 rounding rule) and fail on"
	@echo "            any guard that fails in any; margins in $(BUILD)/robustness/"
	@echo "make linkcheck  follow every external link of the book (chapters not executed)"
	@echo "make env TORCH_INDEX=...  choose where torch comes from (default: auto, see Makefile)"

# Where torch comes from. pip takes `torch==X.Y.*` from requirements.txt, and on Linux
# PyPI's wheel brings several GB of CUDA packages. TORCH_INDEX is an extra index for
# torch (and its own dependencies, held to requirements.txt's pins) only:
#   auto (default)  PyTorch's CPU index on Linux without a working nvidia-smi, if it
#                   answers within 5 s; otherwise none (tools/torch_index.py says why)
#   TORCH_INDEX=    none: torch from pip's configured index (PyPI)
#   TORCH_INDEX=URL that index, e.g. https://download.pytorch.org/whl/cu126
TORCH_INDEX ?= auto
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# pip compiles every installed module one file after another (about 47 CPU-s here); the
# env recipe compiles them afterwards on every core instead (compileall -j 0), as pip
# would: a file that does not compile is left as it is, never an install failure.
PIP := $(PY) -m pip install --disable-pip-version-check --no-compile

env: $(STAMP)

$(STAMP): requirements.txt pyproject.toml bookpkg/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@index='$(TORCH_INDEX)'; \
	if [ "$$index" = auto ]; then \
	  index="$$($(PY) tools/torch_index.py --cpu-index '$(TORCH_CPU_INDEX)')"; \
	fi; \
	echo "make env: torch from $${index:-the configured index} (TORCH_INDEX=... to choose)"; \
	$(PIP) $${index:+--extra-index-url "$$index"} -c requirements.txt torch
	$(PIP) --quiet -r requirements.txt
	@# emerging-optimizers 0.3.0 declares Python >= 3.12 (see requirements.txt).
	if $(PY) -c 'import sys; sys.exit(sys.version_info >= (3, 12))'; then \
	  $(PIP) --quiet --no-deps --ignore-requires-python \
	     emerging-optimizers==0.3.0; \
	fi
	$(PIP) --quiet --no-deps -e . -e bookpkg
	$(PY) -m compileall -qq -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (eigprec)" >/dev/null
	@touch $@

# Content and modification time of every input: `touch` counts as a change too,
# as it does for make itself. tools/cache_key.py, not `find -printf` and `sha256sum`:
# the same on macOS's BSD tools as on GNU's.
CACHE_KEY = $$($(PY) tools/cache_key.py $(CACHE_INPUTS))

# Drop the execution cache and Sphinx's environment when the key changed.
cache-key: env
	@key=$(CACHE_KEY); \
	if [ "$$(cat $(CACHE_KEY_FILE) 2>/dev/null)" != "$$key" ]; then \
	  if [ -d $(BUILD)/.jupyter_cache ]; then \
	    echo "src/, book/data/ or the requirements changed: re-executing every chapter"; \
	  fi; \
	  rm -rf $(BUILD)/.jupyter_cache $(BUILD)/.doctrees; \
	  mkdir -p $(BUILD); echo "$$key" > $(CACHE_KEY_FILE); \
	fi

# The reader's notebook of every chapter page (issue 25): what "Open in Colab" and the
# Download button give, generated from the executed build (_build/jupyter_execute) with
# glued values filled in, no MyST syntax, no guard cells, outputs kept, and the install
# pinned to the commit built. The site's download copies (_sources/) are replaced by them.
READER_NOTEBOOKS := $(PY) tools/reader_notebooks.py --executed $(BUILD)/jupyter_execute \
	--out $(BUILD)/notebooks --html $(BUILD)/html --cache $(BUILD)/.jupyter_cache

# The notebook pages executed into the execution cache, several kernels at once (one per
# core), before jupyter-book: it then finds them cached instead of running them one after
# another (`make test`'s strict build). Pages cached with the same code cells are not run again.
EXECUTE_PAGES := $(PY) tools/execute_pages.py --config _config.yml --toc _toc.yml \
	--cache $(BUILD)/.jupyter_cache

notebooks: env
	$(READER_NOTEBOOKS)

# The pages are executed by the same tool, with the same kernel settings (one torch thread
# per kernel unless OMP_NUM_THREADS says otherwise), as `make test`'s strict build, so
# the README's two commands print the same numbers on one machine (issue 32); jupyter-book
# then finds every page in the cache. A page whose guard fails stops the build here.
book: cache-key
	$(EXECUTE_PAGES)
	$(JB)
	$(READER_NOTEBOOKS)
	@echo "The book is at $(abspath $(BUILD)/html/index.html)"

# The PDF edition (issue 51): the pages as `make book` executed them (the same execution
# cache; a page not in it is executed first, as `make book` does), through Sphinx's LaTeX
# builder (book/_ext/eigprec_latex.py) and xelatex. jupyter-book writes <path>/_build, so
# BUILD must end in _build here. `make test` does not build it (tests/test_pdf.py does,
# marked `pdf`: the weekly workflow runs it); the publishing workflow puts it on the site.
PDF_NAME := eigen-precision
PDF := $(BUILD)/pdf/$(PDF_NAME).pdf
LATEXMKOPTS := -interaction=nonstopmode -halt-on-error -file-line-error

pdf: cache-key
	@$(PY) tools/pdf_prerequisites.py
	@if [ "$(notdir $(abspath $(BUILD)))" != _build ]; then \
	  echo "make pdf: BUILD=$(BUILD) must end in _build (jupyter-book writes <path>/_build)" >&2; \
	  exit 1; \
	fi
	$(EXECUTE_PAGES)
	$(BIN)/jupyter-book build . --builder latex --keep-going -W \
	  --path-output $(patsubst %/_build,%,$(abspath $(BUILD)))
	$(MAKE) --no-print-directory -C $(BUILD)/latex $(PDF_NAME).pdf LATEXMKOPTS="$(LATEXMKOPTS)"
	@mkdir -p $(dir $(PDF)); cp $(BUILD)/latex/$(PDF_NAME).pdf $(PDF)
	@echo "The PDF is at $(abspath $(PDF))"

# The PDF built and read back as a reader would (tests/test_pdf.py, marked `pdf`, which no
# other target runs): page count, titles, references, figures, boxes, hidden cells. Fails
# where TeX or poppler-utils is missing (the test alone would skip). The weekly workflow.
pdf-check: env
	EIGPREC_PDF_REQUIRED=1 EIGPREC_PDF_BUILD=$(abspath $(BUILD)) \
	  $(PY) -m pytest -m pdf tests/test_pdf.py

# What `make pdf` needs beyond .venv (TeX Live, xindy, rsvg-convert, DejaVu fonts), with
# apt-get; the weekly and publishing workflows run it.
pdf-prerequisites:
	$(PYTHON) tools/pdf_prerequisites.py --install

# The pages are MyST Markdown, which ruff does not read: tools/lint_pages.py hands each
# page's code cells to ruff as a notebook and reports findings at the page's lines.
lint: env
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PY) tools/lint_pages.py

# One worker more than there are cores, each torch on one thread. Many tests wait on a
# subprocess, a kernel or Chromium, and a worker's torch with one thread per core left
# the cores idle a third of the time or fighting each other: on the 2-core machine, 3
# workers of one thread took 143-147 s against 181 s for `-n auto` (2 workers of 2
# threads), 154 s with 4 workers and 170 s with 2; kernels the tests start inherit it.
# (--dist loadgroup does not group here: with pytest 9.2 xdist 3.8 never tags the test
# ids, and each test became its own scope: 343 s against 276 s for the default.)
# --dist worksteal: the default (load) handed one worker a late chunk holding the slow
# build, wheel and browser tests (gpu_wheels, offline_book, nitpicky, intro), which it ran
# alone for its last 140 s while the other two had finished (workers done at 422, 280 and
# 277 s; 467 s in all); a worker that runs out takes half of another's queue instead
# (336, 360, 356 s; 405 s in all; one timed run of each), issue 45.
UNIT_JOBS ?= $$($(PY) -c 'import os; print((os.cpu_count() or 1) + 1)')
unit: env
	OMP_NUM_THREADS=1 $(PY) -m pytest -n $(UNIT_JOBS) --dist worksteal

# Always executes: the cache is emptied first (and refilled for `make book`).
# -n (nitpicky): a cross-reference that resolves nowhere is a warning, so an error;
# nitpick_ignore_regex in _config.yml lists the types Sphinx cannot link (torch's).
strict-book: env
	rm -rf $(BUILD)/.jupyter_cache $(BUILD)/.doctrees $(BUILD)/html $(CACHE_KEY_FILE)
	$(EXECUTE_PAGES)
	$(JB) --all -W -n
	$(READER_NOTEBOOKS)
	@mkdir -p $(BUILD); echo $(CACHE_KEY) > $(CACHE_KEY_FILE)

# The built site as a reader meets it: internal links and anchors, no asset from the
# network, Colab buttons; then every page in headless Chromium (skipped, saying so,
# where Chromium is not installed; .ci/run installs it), one screenshot per page: its
# layout at 1280 px and on a 390-px phone, and axe-core's accessibility rules (vendored
# in tools/axe-core; serious and critical findings fail, tools/page_axe.py). Of Sphinx's
# source listings (_modules/, one template) the index and the longest are checked so;
# the others are loaded and checked for load, console and math faults (--every-listing).
site-check: env
	$(PY) tools/check_site.py $(BUILD)/html --config _config.yml
	$(PY) tools/check_browser.py $(BUILD)/html --screenshots $(BUILD)/screenshots \
	  --json $(BUILD)/browser-check.json --search eigenvalue --count-listings

# The GPU publishing workflow (.github/workflows/book.yml): strict like `make test`,
# but it keeps an execution cache the workflow restores on a fresh checkout, where
# file times are new; so this key hashes contents only (plus EIGPREC_SCALE and the
# device) and lives inside the cache folder it vouches for.
CONTENT_KEY = $$($(PY) tools/cache_key.py --content-only --extra "scale=$${EIGPREC_SCALE:-chapter}" \
	--extra "$$($(PY) -c 'import torch; c = torch.cuda; print(c.get_device_name() if c.is_available() else "cpu")')" \
	$(CACHE_INPUTS))
PUBLISH_KEY_FILE := $(BUILD)/.jupyter_cache/.eigprec-content-key

publish: env
	@key=$(CONTENT_KEY); \
	if [ "$$(cat $(PUBLISH_KEY_FILE) 2>/dev/null)" != "$$key" ]; then \
	  if [ -d $(BUILD)/.jupyter_cache ]; then echo "execution cache is stale: emptying it"; fi; \
	  rm -rf $(BUILD)/.jupyter_cache $(BUILD)/.doctrees; \
	fi
	$(JB) -W -n
	$(READER_NOTEBOOKS)
	@mkdir -p $(BUILD)/.jupyter_cache; echo $(CONTENT_KEY) > $(PUBLISH_KEY_FILE)
	@echo "The book is at $(abspath $(BUILD)/html/index.html)"

# Every reader's notebook (what Colab opens; written by the build before it) run once
# as Colab runs it: a fresh environment without eigprec where only the install cell's
# %pip install (pointed at this checkout) provides it. A failing notebook's executed copy
# and traceback are left in $(BUILD)/colab/failed/. COLAB_QUICK=1 (`make test`): the
# degeneracy chapter's experiments run one seed and smaller grids, so this second
# execution of the chapters costs about half the CPU time of the first; every cell still
# runs, and the strict build has checked the pages' claims at chapter scale. The weekly
# job runs the published notebooks at a reader's scale in Colab's own image.
COLAB_QUICK ?=
colab-check: env
	@notebooks="$$(find $(BUILD)/notebooks -name '*.ipynb' 2>/dev/null | sort)"; \
	if [ -z "$$notebooks" ]; then \
	  echo "colab-check: no reader's notebooks in $(BUILD)/notebooks; run make book first" >&2; \
	  exit 1; \
	fi; \
	$(PY) tools/colab_check.py $$notebooks --workdir $(BUILD)/colab $(if $(COLAB_QUICK),--quick)

# Lint, the unit suite and the strict build one after another, each keeping both cores
# busy (the suite beside the build took 640 s against 300 + 325 s one after the other;
# with UNIT_JOBS' one-thread workers 297 s against about 313 s, not worth the load on
# the suite's timed tests; the suite beside the last two stages, 22 min in all), then
# the site checks beside the Colab run: the browser check mostly waits on Chromium (396 s
# side by side against 165 + 331 s; on 27 November 162 s beside 222 s). That pair's
# output is printed whole, stage by stage, as each finishes (--output-sync); a failing
# stage fails `make test` once its partner has finished. The chapters execute twice: in
# the strict build and in the Colab run, which needs the reader's notebooks the build
# writes; that second run is the quick one (COLAB_QUICK=1).
PAIR := $(MAKE) --no-print-directory -j2 --output-sync=target
test: lint unit strict-book
	$(PAIR) site-check colab-check COLAB_QUICK=1
	@echo "make test: lint, unit tests, the strict book build, the site checks and the Colab run all passed"

# External links (the weekly workflow): every link of the book followed, the chapters
# not executed (execute_notebooks off in a copy of _config.yml), in a build folder of
# its own. linkcheck_ignore in _config.yml lists sites that refuse bots.
LINKCHECK := $(BUILD)/linkcheck
linkcheck: env
	$(PY) tools/linkcheck_config.py _config.yml $(LINKCHECK)/_config.yml
	$(BIN)/jupyter-book build . --builder linkcheck --config $(LINKCHECK)/_config.yml \
	  --path-output $(LINKCHECK)
	@echo "Report: $(LINKCHECK)/_build/html/output.txt"

# Every page executed under several configurations of the arithmetic (issue 32): one
# thread; all cores; ATen's baseline kernels; MKL's reproducible (CBWR) mode, off its
# AVX2/AVX-512 kernels; the emulator's ties-to-even rounding, as Hopper GPUs round. Each in its
# own cache; the guard-margin reports merged into $(BUILD)/robustness/report.{json,md}.
# Fails on any guard that fails in any configuration. The weekly workflow runs it; it
# takes about 5 times the strict build's page execution. ROBUSTNESS_ARGS="--configs a b".
ROBUSTNESS_ARGS ?=
robustness: env
	$(PY) tools/robustness.py --config _config.yml --toc _toc.yml --out $(BUILD)/robustness \
	  $(ROBUSTNESS_ARGS)

# On an offline NVIDIA machine: everything GPU-only, into $$OUT or $(BUILD)/gpu-record
# (CONTRIBUTING.md, "Recording on a GPU machine"). Needs no .venv: it builds its own on the
# machine's torch and CuPy. Options: make gpu-record GPU_RECORD_ARGS="--steps eig".
.PHONY: gpu-record
gpu-record:
	PYTHON=$(PYTHON) bash tools/gpu/gpu_record.sh $(GPU_RECORD_ARGS)

clean:
	rm -rf $(BUILD)
