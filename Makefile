# Two commands do all set-up: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# torch/torchvision pinned to the builds this machine has on local disk (others pull multi-GB CUDA wheels).
TORCH_PINS := torch==2.14.1 torchvision==0.29.1

.PHONY: install test lint demo clean browser screenshot field streams

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PINS)
	$(PY) -m pip install -q -e '.[test]' $(TORCH_PINS)
	touch $(STAMP)

install: $(STAMP)

# The real-browser UI tests drive a Chromium already on this machine: $(MSTTA_CHROMIUM), one on PATH,
# or Playwright's own (`$(PY) -m playwright install chromium`). Without one they are skipped, saying
# how to get one; with CI=true a missing browser fails the run (.ci/run installs Debian's chromium).
browser: install
	@$(PY) -c "import sys; sys.path.insert(0, 'tests'); from helpers_ui import find_chromium, NO_BROWSER; \
	found = find_chromium(); print('browser tests use', found) if found else print('browser tests skipped:', NO_BROWSER)"

# Two workers (this machine's two cores), each test file whole on one worker (its module fixtures,
# e.g. a UI server, shared by its tests); the slowest tests listed at the end.
test: install browser
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=15

# Static checks (rules in pyproject.toml, [tool.ruff]): the layout (`ruff format`, line length 120),
# unused/undefined names, likely bugs, import order. `$(VENV)/bin/ruff format .` applies the layout.
# Then no import cycle in app/, mstta/ or benchmarks/, deferred and TYPE_CHECKING imports counted.
lint: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(PY) tools/import_cycles.py app mstta benchmarks

# The README's screenshot of the UI (assets/ui.png), made by the browser tests' tooling at 1280x720.
screenshot: install
	$(PY) tests/helpers_ui.py --screenshot assets/ui.png

# The main job: the browser UI streaming the bundled video (CLIP vs MS-TTA side by side), on
# http://127.0.0.1:7860 (`mstta-demo --bundled-demo`): OpenAI's ViT-B-16 on assets/demo.mp4 when its
# weights are in the local cache; offline, the bundled digits model (mstta-digits) on assets/digits.mp4,
# with one line saying so. `make demo DEMO_ARGS="--headless --out out/annotated.mp4 --log out/preds.jsonl"`
# runs it without a browser; --model/--pretrained or --video in DEMO_ARGS replace its parts.
DEMO_ARGS ?=
demo: install
	$(VENV)/bin/mstta-demo --bundled-demo $(DEMO_ARGS)

# The field table offline: every method row on the shifted digits (mstta-digits), out/field/report.md and results.csv.
field: install
	$(VENV)/bin/mstta-bench field --digits --text official --out out/field --store out/field/features

# Streams with scene cuts offline (docs/streams.md): on the shifted digits of `make field` (same store), every
# stateful row of the registry but TPT (its prompt tuning needs the model's text tower; the streams replay
# features): the cache family's rows without boosting (MS-TTA, TDA, the baseline, TDA + MS) and the other
# families' plain rows (DMN-ZS, DOTA, OnZeta, BCA, DPE) under every forgetting arm their family defines on
# every stream kind (the label-correlated ones on the blur domain); the boosting rows and the other families'
# +MS rows under never / the oracle / the recommended rule where the family defines it / the detector, on the
# cut, return and i.i.d. streams; ZERO and MTA on the i.i.d. streams. One worker process per
# core (--jobs N to say otherwise; the same results whatever N). out/streams/report.md, results.csv, plots/.
STREAM_METHODS := tda,boostadapter,ms-tta,ms-tta+boost,baseline,baseline+boost,tda+ms,boostadapter+ms,dmn-zs,dmn-zs+ms,dota,dota+ms,onzeta,onzeta+ms,bca,bca+ms,dpe,dpe+ms,zero,mta
streams: install
	$(VENV)/bin/mstta-bench streams --digits --out out/streams --store out/field/features --methods $(STREAM_METHODS) \
		--all-arms-for ms-tta,tda,baseline,tda+ms,dmn-zs,dota,onzeta,bca,dpe --short-streams cut,return,iid --correlated-on blur

clean:
	rm -rf $(VENV) build *.egg-info
