# sglang-gemma4: the pinned sglang release (upstream.toml) + patches/series -> a patched sglang.
#
#   make            apply + build: work/sglang (git, one commit per patch) and dist/*.whl;
#                   on a GPU host whose python3 imports the patched sglang, then serve
#   make test       lint, series checks, tool tests and every patch's CPU tests (builds .venv-test once,
#                   a CPU-only environment: test/env/build.sh)
#   make help       everything else, in two parts: using the stack, maintaining it

PYTHON ?= python3
VENV := .venv
TOOLS := $(VENV)/bin/sglang-gemma4
TEST_VENV := .venv-test
TEST_PY := $(TEST_VENV)/bin/python
# make test's pytest-xdist workers (TEST_JOBS=0: one process)
TEST_JOBS ?= $(shell nproc)
APPLY_FLAGS := $(if $(FORCE),--force,)

.DEFAULT_GOAL := all
.PHONY: all help fetch apply build status version lint readme refresh new rebase rebase-continue rebase-amend rebase-status rebase-abort rebase-check drift-check port-check port-build test verify-tests bundle serve clean-work clean python-version quilt shellcheck

# A variable a target needs, checked before any of its prerequisites is built.
require = $(if $(value $(1)),,$(error make $(2): $(1) is missing, e.g. make $(2) $(3)))
ifneq ($(filter new,$(MAKECMDGOALS)),)
$(call require,NAME,new,NAME=gemma4-fused-router SUBJECT="gemma4: fuse the router")
$(call require,SUBJECT,new,NAME=$(NAME) SUBJECT="one line: what the patch does")
endif
ifneq ($(filter rebase,$(MAKECMDGOALS)),)
$(call require,TO,rebase,TO=0.5.23)
endif
ifneq ($(filter rebase-amend,$(MAKECMDGOALS)),)
$(call require,PATCH,rebase-amend,PATCH=0200-generate-batch-shapes.patch)
endif
ifneq ($(filter port-check,$(MAKECMDGOALS)),)
$(call require,PORT,port-check,PORT=0.5.23)
endif
ifneq ($(filter port-build,$(MAKECMDGOALS)),)
$(call require,PORT,port-build,PORT=0.5.23)
endif
ifneq ($(filter rebase-check,$(MAKECMDGOALS)),)
$(call require,TO,rebase-check,TO=0.5.23)
endif

all: apply build  ## the main job: apply + build; on a GPU host whose python3 has the patched sglang, serve
	@if nvidia-smi -L >/dev/null 2>&1; then \
	  if python3 scripts/check_patched_sglang.py >/dev/null 2>&1; then $(MAKE) --no-print-directory serve; \
	  else echo "make: GPU host: to serve, install dist/*.whl (or source env-patched.sh from the bundle), then make serve"; fi; \
	fi

# `## ` marks a target of the stack's users, `### ` one of its maintainers.
help:  ## list the targets
	@echo "Using the stack:"
	@grep -E '^[a-z-]+:.*[^#]## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 16
	@echo; echo "Maintaining it:"
	@grep -E '^[a-z-]+:.*### ' $(MAKEFILE_LIST) | sed 's/:.*### /\t/' | expand -t 16

python-version:  # the tools read TOML with tomllib (3.11+)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "make: $(PYTHON) is $$($(PYTHON) --version 2>/dev/null || echo "not found"); the tools need Python 3.11 or newer" \
	    "(e.g. make PYTHON=python3.11 ...)" >&2; exit 2; }

quilt:  # make test also applies the series with quilt
	@command -v quilt >/dev/null || { echo "make test: quilt is not installed (e.g. apt-get install quilt):" \
	  "the tests apply the series with quilt push -a too" >&2; exit 2; }

$(VENV)/.stamp: python/pyproject.toml | python-version
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e 'python/[lint]'
	touch $@

$(TEST_VENV)/.stamp: test/requirements-cpu.txt python/pyproject.toml test/env/build.sh | python-version
	test/env/build.sh $(PYTHON) $(TEST_VENV)
	touch $@

fetch: $(VENV)/.stamp  ## download the pinned wheels, verify their sha256
	$(TOOLS) fetch

apply: fetch  ## work/sglang = pristine base + one commit per patch (FORCE=1 stashes local edits)
	$(TOOLS) apply $(APPLY_FLAGS)

build: $(VENV)/.stamp  ## dist/sglang-<ver>+gemma4.<hash>-*.whl (PYTHON_TARGET=3.12 for the GPU host)
	$(TOOLS) build $(if $(PYTHON_TARGET),--python $(PYTHON_TARGET),)

status: fetch  ## per patch: applies to the pin? applied in work/sglang? upstream status
	$(TOOLS) status

version: $(VENV)/.stamp  ## print the local version naming this pin + series
	@$(TOOLS) version

lint: $(VENV)/.stamp  ### check patches/series, every patch header, new commit subjects, Python style (ruff.toml)
	$(TOOLS) lint
	$(VENV)/bin/ruff check python test
	$(VENV)/bin/ruff format --check python test

readme: $(VENV)/.stamp  ### regenerate the README's tables, benchmark_results/README.md and Bench: lines
	$(TOOLS) readme

refresh: $(VENV)/.stamp  ### export work/sglang's commits back into patches/*.patch
	$(TOOLS) refresh

new: $(VENV)/.stamp  ### NAME=slug SUBJECT="..." : a new patch from uncommitted edits in work/sglang
	$(TOOLS) new "$(NAME)" --subject "$(SUBJECT)"

# Each patch's tests run after it goes in, and at a conflict without it (the already-upstream check),
# in the new release's own CPU environment (built once under .cache/testenv/ from its wheel's pins),
# unless REBASE_PYTHON names an interpreter to use as it is. TESTS=0 runs none.
REBASE_FLAGS = $(if $(REBASE_PYTHON),--python $(REBASE_PYTHON),) $(if $(filter 0,$(TESTS)),--skip-tests,)
rebase: $(VENV)/.stamp  ### TO=0.5.18 : move the series to a newer sglang, testing each patch; stops at a conflict or failing tests (TESTS=0, CHECK_UPSTREAM=1, FORCE=1: older)
	$(TOOLS) rebase --to "$(TO)" $(REBASE_FLAGS) $(if $(FORCE),--force,) $(if $(CHECK_UPSTREAM),--check-upstream,)

rebase-continue: $(VENV)/.stamp  ### after a stop, or to resume an interrupted rebase: go on (DROP=1 WHY="..." drops; ACCEPT_FAILING=1 WHY="..." keeps failing tests)
	$(TOOLS) rebase --continue $(if $(DROP),--drop,) $(if $(ACCEPT_FAILING),--accept-failing,) $(if $(WHY),--why "$(WHY)",)

rebase-amend: $(VENV)/.stamp  ### PATCH=0200-x.patch : at failing tests, fold work/sglang's edits into that earlier moved patch; both retested
	$(TOOLS) rebase --amend "$(PATCH)"

rebase-status: $(VENV)/.stamp  ### where a rebase under way stands: its patch, why it stopped, what to run next
	$(TOOLS) rebase --status

rebase-abort: $(VENV)/.stamp  ### forget a rebase under way: work/sglang back on the old pin, repository untouched
	$(TOOLS) rebase --abort

rebase-check: $(VENV)/.stamp apply  ### TO=0.5.23 : drift report for a newer release in docs/drift/ (changes nothing else)
	$(TOOLS) rebase-check --to "$(TO)" $(REBASE_FLAGS)

drift-check: $(VENV)/.stamp  ### fail if docs/drift/'s report was made for another series than today's
	$(TOOLS) drift-status

# A port (ports/X): the series refreshed for a newer release, beside the served pin. Its CPU tests
# run in that release's own CPU environment (built once under .cache/testenv/).
port-check: $(VENV)/.stamp  ### PORT=0.5.23 : the port applies exactly, its CPU tests pass, it is not older than patches/ (WRITE=1 rewrites its REPORT.md)
	$(TOOLS) port-check --port "$(PORT)" $(if $(WRITE),--write,) $(if $(filter 0,$(TESTS)),--skip-tests,)

port-build: $(VENV)/.stamp  ## PORT=0.5.23 : dist/sglang-<PORT>+gemma4.<hash>-*.whl from the port (PYTHON_TARGET=3.12 for the GPU host)
	$(TOOLS) port-build --port "$(PORT)" $(if $(PYTHON_TARGET),--python $(PYTHON_TARGET),)

bundle: apply  ## dist/bundle/: offline archive for the GPU host (scripts/gpu/setup.sh installs it)
	$(TOOLS) bundle

# On a GPU host whose python3 imports the patched sglang (the built wheel installed, or
# `. /tmp/sglang-gemma4/env-patched.sh` from the offline bundle): no download, no arguments.
SERVE_MODEL := checkpoints/serve-e2b
serve:  ## GPU host: make a small random-weight E2B-shaped checkpoint once, serve it (SERVE_FLAGS=...)
	@python3 scripts/check_patched_sglang.py
	@test -f $(SERVE_MODEL)/model.safetensors || PYTHONPATH=python python3 -m sglang_gemma4 checkpoint \
	  --variant e2b --layers 8 --weights random --device auto --out $(SERVE_MODEL)
	scripts/launch_gemma4.sh e2b --model $(SERVE_MODEL) $(SERVE_FLAGS)

test: quilt $(TEST_VENV)/.stamp apply lint  ### lint, series and apply checks, tool tests, each patch's CPU tests
	$(TEST_PY) -m pytest -n $(TEST_JOBS) --dist worksteal

shellcheck:  ### check every shell script of the repository (CI runs it)
	git ls-files -z '*.sh' .ci/run | xargs -0 shellcheck

verify-tests: $(TEST_VENV)/.stamp apply  ### each patch's tests fail without it and pass with it
	$(TEST_PY) -m sglang_gemma4 verify-tests --python $(TEST_PY)

clean-work:  ## remove the work tree (refuses nothing: commit or refresh first)
	rm -rf work/sglang work/sglang.partial

clean:  ## remove everything generated (venvs, cache, work tree, dist)
	rm -rf $(VENV) $(TEST_VENV) .cache work dist
