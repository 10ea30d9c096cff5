# Two commands do all set-up: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# torch/torchvision pinned to the builds this machine has on local disk (others pull multi-GB CUDA wheels).
TORCH_PINS := torch==2.14.1 torchvision==0.29.1

.PHONY: install test lint demo clean browser screenshot

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

test: install browser
	$(PY) -m pytest -q

# Static checks (rules in pyproject.toml, [tool.ruff]): unused/undefined names, likely bugs, import order.
lint: install
	$(VENV)/bin/ruff check .

# The README's screenshot of the UI (assets/ui.png), made by the browser tests' tooling at 1280x720.
screenshot: install
	$(PY) tests/helpers_ui.py --screenshot assets/ui.png

# The main job: the browser UI streaming the bundled video (CLIP vs MS-TTA side by side), on
# http://127.0.0.1:7860. Offline without CLIP weights it stops with the missing-weights line;
# `make demo DEMO_ARGS="--model mstta-tiny --pretrained none"` runs it with random weights, and
# `DEMO_ARGS="--headless --out out/annotated.mp4 --log out/preds.jsonl"` without a browser.
DEMO_ARGS ?=
demo: install
	$(VENV)/bin/mstta-demo --video assets/demo.mp4 --labels assets/labels.txt --truth assets/truth.csv $(DEMO_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
