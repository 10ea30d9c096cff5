# Two commands do all set-up: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# torch/torchvision pinned to the builds this machine has on local disk (others pull multi-GB CUDA wheels).
TORCH_PINS := torch==2.14.1 torchvision==0.29.1

.PHONY: install test demo clean browser

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PINS)
	$(PY) -m pip install -q -e '.[test]' $(TORCH_PINS)
	touch $(STAMP)

install: $(STAMP)

# Debian's Chromium for the real-browser UI tests (a test tool's own browser download fails offline).
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -q && apt-get install -y -q chromium chromium-driver)

test: install browser
	$(PY) -m pytest -q

# The main job: the browser UI streaming the bundled video (CLIP vs MS-TTA side by side), on
# http://127.0.0.1:7860. Offline without CLIP weights it stops with the missing-weights line;
# `make demo DEMO_ARGS="--model mstta-tiny --pretrained none"` runs it with random weights, and
# `DEMO_ARGS="--headless --out out/annotated.mp4 --log out/preds.jsonl"` without a browser.
DEMO_ARGS ?=
demo: install
	$(VENV)/bin/mstta-demo --video assets/demo.mp4 --labels assets/labels.txt --truth assets/truth.csv $(DEMO_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
