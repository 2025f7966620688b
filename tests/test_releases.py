"""The vLLM release registry (`spec.releases`) and each release's semantics in the reference.

No vLLM needed: the reference core, the trace reader and the claims, on the
two supported releases. Each semantic difference has a workload on which the
two releases' references differ the way the two vLLMs do (the in-process
conformance suite runs vLLM 0.32 and 0.33 themselves against them), so
planting the 0.32 rule into 0.33 (or the reverse) fails a test here.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from lora_sched.policy import claims
from lora_sched.policy.check import check_trace
from lora_sched.policy.driver import Workload, run
from lora_sched.policy.replay import replay
from lora_sched.spec import releases
from lora_sched.spec.config import Config, ConfigError
from lora_sched.spec.request import Request
from lora_sched.spec.trace import TraceError, TraceWriter, read_trace
from strategies import scenarios
from test_search_violations import _breaks_batch_cap, _running_lora_cap_broken, lora_skips, throttled_streams

from experiments.crash import CONFIG as CRASH_CONFIG
from experiments.crash import first_cap_break, shortest_crash

ROOT = Path(__file__).resolve().parents[1]
SELF_PREEMPT_TRACE = ROOT / "docs" / "traces" / "vllm-0.33-priority-self-preempt.jsonl"
CAPS = {"batch_lora_cap", "running_lora_cap"}


# ---- the registry ----------------------------------------------------------------

def test_registry_lists_the_supported_releases():
    assert list(releases.RELEASES) == ["0.32", "0.33", "0.34"]
    assert releases.NEWEST == "0.34" and releases.LEGACY == "0.32"
    assert releases.SUPPORTED == "0.32.x, 0.33.x, 0.34.x"
    assert releases.get("0.33.0") is releases.RELEASES["0.33"]
    assert releases.get("0.32.7+cpu").name == "0.32"
    assert releases.release_name("0.33.1") == "0.33" and releases.release_name("0.32.0") != "0.33"


@pytest.mark.parametrize("bad", ["0.35.0", "0.31", "1.0.0", "latest", ""])
def test_unknown_release_is_named_with_the_supported_ones(bad):
    with pytest.raises(releases.UnknownRelease) as info:
        releases.get(bad)
    assert repr(bad) in str(info.value) or f"vLLM {bad} " in str(info.value)
    assert "0.32.x, 0.33.x, 0.34.x" in str(info.value)


def test_config_rejects_an_unknown_release():
    with pytest.raises(ConfigError, match=r"vllm must be a supported release \(0.32, 0.33, 0.34\), got '0.35'"):
        Config(vllm="0.35")
    assert Config().vllm == "0.32"  # the release the Z3 encoding models


def test_trace_schema_lists_the_registry():
    schema = json.loads((ROOT / "docs" / "trace.schema.json").read_text())
    prop = schema["$defs"]["config"]["properties"]["vllm"]
    assert prop["enum"] == list(releases.RELEASES) and prop["default"] == releases.LEGACY


# ---- the trace header selects the release --------------------------------------

def _trace(tmp_path: Path, source: str, config: dict) -> Path:
    path = tmp_path / "t.jsonl"
    head = {"kind": "header", "format": "lora-sched-trace", "version": 1, "source": source, "config": config}
    path.write_text(json.dumps(head) + "\n")
    return path


@pytest.mark.parametrize("source, config, want", [
    ("vllm 0.33.0", {}, "0.33"),
    ("vllm 0.32.0", {}, "0.32"),
    ("vllm 0.33.2+cpu", {"vllm": "0.33"}, "0.33"),
    ("lora-sched reference", {"vllm": "0.33"}, "0.33"),
    ("lora-sched reference", {}, "0.32"),  # before the registry every trace was 0.32's
    ("", {}, "0.32"),
])
def test_source_selects_the_release(tmp_path, source, config, want):
    assert read_trace(_trace(tmp_path, source, config)).config.vllm == want


@pytest.mark.parametrize("source, unregistered", [
    ("vllm 0.35.0", "0.35.0"), ("vllm 0.31.1", "0.31.1"), ("vllm 0.36.0.dev12+g1a2b3c", "0.36.0.dev12+g1a2b3c"),
    ("vllm 0.34.1", None), ("lora-sched reference", None),
])
def test_an_unregistered_release_is_read_with_the_newest_semantics(tmp_path, source, unregistered):
    trace = read_trace(_trace(tmp_path, source, {}))
    assert trace.unregistered == unregistered
    if unregistered is not None:
        assert trace.config.vllm == releases.NEWEST


@pytest.mark.parametrize("source, config, needle", [
    ("vllm 0.33.0", {"vllm": "0.32"}, "source 'vllm 0.33.0' names vLLM 0.33 but config says vllm '0.32'"),
    ("lora-sched reference", {"vllm": "0.9"}, "vllm must be a supported release (0.32, 0.33, 0.34), got '0.9'"),
])
def test_unknown_or_inconsistent_release_is_a_trace_error(tmp_path, source, config, needle):
    with pytest.raises(TraceError) as info:
        read_trace(_trace(tmp_path, source, config))
    assert info.value.line == 1 and needle in str(info.value), str(info.value)


def test_reference_trace_records_its_release(tmp_path):
    cfg = Config(vllm="0.33")
    run(cfg, Workload([Request("a", 1, 2, 2, 1)]), trace_path=tmp_path / "r.jsonl")
    assert read_trace(tmp_path / "r.jsonl").config.vllm == "0.33"
    with TraceWriter(tmp_path / "w.jsonl", Config(), "vllm 0.33.0"):
        pass
    with pytest.raises(TraceError, match="names vLLM 0.33 but config says vllm '0.32'"):
        read_trace(tmp_path / "w.jsonl")  # a writer must not contradict its own source


# ---- the semantics, one workload each ---------------------------------------------

# Priority, KV for 2 blocks of 2 tokens: at step 3 r0 (the lowest priority)
# needs a block, is its own victim and is preempted; 0.32 ends the running
# loop there, 0.33 goes on and schedules r1 into the block r0 freed.
SELF_PREEMPT = (Config(max_num_seqs=4, max_num_batched_tokens=16, block_size=2, kv_blocks=2, queue="priority"),
                Workload([Request("r0", 0, 1, 3, 1, 2), Request("r1", 0, 2, 2, 2, 1)]))


@pytest.mark.parametrize("release, step3", [("0.32", {}), ("0.33", {"r1": 1}), ("0.34", {"r1": 1})])
def test_priority_self_preemption_per_release(release, step3):
    cfg, wl = SELF_PREEMPT
    recs = {r.step: r for r in run(replace(cfg, vllm=release), wl).records}
    assert recs[3].preempted == ["r0"] and recs[3].scheduled == step3


def test_a_033_trace_with_priority_self_preemption_checks_ok(tmp_path):
    """Recorded from vLLM 0.33's own scheduler in-process (SELF_PREEMPT):
    checks ok against 0.33's reference; relabelled as 0.32 it diverges at the
    self-preemption, which is what the registry is for."""
    report = check_trace(str(SELF_PREEMPT_TRACE), policy="vllm")
    assert report.trace.source == "vllm 0.33.0" and report.trace.config.vllm == "0.33"
    assert report.ok and report.replay is not None and report.replay.matched == len(report.trace.steps())
    assert any(s.preempted == ["r0"] and "r1" in s.scheduled for s in report.trace.steps())
    relabelled = tmp_path / "as-032.jsonl"
    relabelled.write_text(SELF_PREEMPT_TRACE.read_text().replace("vllm 0.33.0", "vllm 0.32.0")
                          .replace('"vllm":"0.33"', '"vllm":"0.32"'))
    result = replay(read_trace(relabelled), "vllm")
    assert not result.ok and result.divergence is not None
    assert result.divergence.step == 3 and result.divergence.field == "scheduled"


def test_cap_counts_per_release():
    """0.32 counts the scheduled running requests' adapters: the shortest DP
    throttle crash breaks the batch cap at step 4. 0.33 counts every running
    request's: the same workload keeps it, and the whole 3-request space
    that finds 0.32's crash holds none on 0.33."""
    crash = shortest_crash()
    assert first_cap_break(CRASH_CONFIG, crash.workload) == (crash.step, [1, 2])
    assert first_cap_break(replace(CRASH_CONFIG, vllm="0.33"), crash.workload) is None
    with pytest.raises(LookupError):
        shortest_crash(replace(CRASH_CONFIG, vllm="0.33"))


# One decoding request, prefills arriving: 0.32's DP engine core throttles by
# its wave counter (steps 2, 3 off-cadence), 0.33's scheduler by the steps
# since the last prefill (step 1 admitted a one-token prompt: no prefill).
CADENCE = (Config(max_num_batched_tokens=4, max_num_seqs=4, prefill_schedule_interval=3),
           Workload([Request("d", 0, 1, 10, 1), Request("p", 0, 6, 2, 3), Request("q", 0, 3, 2, 6)]))


@pytest.mark.parametrize("release, off, p_admitted", [
    ("0.32", [2, 3, 5, 6, 8, 9, 11], 4),
    ("0.33", [4, 5, 7, 8, 9, 11], 3),
    ("0.34", [4, 5, 7, 8, 9, 11], 3),
])
def test_prefill_cadence_per_release(release, off, p_admitted):
    cfg, wl = CADENCE
    recs = run(replace(cfg, vllm=release), wl).records
    assert [r.step for r in recs if r.throttle] == off
    assert next(r.step for r in recs if "p" in r.admitted) == p_admitted


# Chunked prefill off, threshold 8, two requests eligible: 0.32 and 0.33 cut
# a's 20-token prompt at the threshold; 0.34 applies it only with chunked
# prefill on (0.34.0's scheduler.py 775-779) and schedules it whole.
THRESHOLD = (Config(max_num_seqs=4, max_num_batched_tokens=32, chunked_prefill=False, long_prefill_token_threshold=8),
             Workload([Request("a", 0, 20, 2, 1), Request("b", 0, 2, 8, 1)]))


@pytest.mark.parametrize("release, chunks", [("0.32", [8, 8, 4]), ("0.33", [8, 8, 4]), ("0.34", [20])])
def test_long_prefill_threshold_per_release(release, chunks):
    cfg, wl = THRESHOLD
    got, done = [], 0
    for rec in run(replace(cfg, vllm=release), wl).records:
        if done < 20 and "a" in rec.scheduled:
            got.append(rec.scheduled["a"])
            done += rec.scheduled["a"]
    assert got == chunks
    on = run(replace(cfg, vllm=release, chunked_prefill=True), wl).records
    assert next(r.scheduled["a"] for r in on if "a" in r.scheduled) == 8  # with chunked prefill every release cuts


def test_claims_per_release():
    for cfg in (Config(async_scheduling=True), Config(prefill_schedule_interval=2)):
        for policy in ("vllm", "blocking"):
            assert not CAPS <= claims(policy, cfg)
            assert CAPS <= claims(policy, replace(cfg, vllm="0.33"))
    assert CAPS <= claims("vllm", Config(vllm="0.33"), skipped_running=True)
    assert "no_hol_blocking" not in claims("blocking", Config(vllm="0.33"))


@pytest.mark.parametrize("release", list(releases.RELEASES))
def test_starvation_on_every_release(release):
    """0.33 fixed the cap's set, not the skip: on the starvation stream the
    adapter-3 request still waits for the whole stream under `vllm`."""
    from lora_sched.policy.scenarios import SCENARIOS

    sc = SCENARIOS["starvation"]
    waits = {p: run(replace(sc.config, vllm=release), sc.workload, policy=p).waits()["victim-a3"]
             for p in ("vllm", "fair")}
    assert waits["vllm"] >= 30 and waits["fair"] < waits["vllm"], waits


# ---- 0.33's stock cap for any size, and the searches that break 0.32 --------------------

@pytest.mark.parametrize("policy", ["vllm", "blocking"])
def test_033_stock_cap_is_proved_for_any_size(policy):
    """What `claims` gives vLLM's own cap on 0.33 (both caps, with any running
    request left unscheduled: async, the cadence, PP) is proved for any number
    of requests and adapters (`proofs.unbounded`, model `P+skip@0.33`); the
    same model with 0.32's set (the planted `fair_scheduled_set`) fails."""
    from lora_sched.proofs import unbounded as u

    model = u.Model(policy, True, release="0.33")
    good, bad = next((set(g), set(b)) for m, g, b in u.MODELS if m == model)
    claimed = claims(policy, Config(policy=policy, vllm="0.33", async_scheduling=True,
                                    prefill_schedule_interval=2), skipped_running=True)
    assert claimed & set(u.PROPERTIES) <= good and not bad
    outs = {o.name: o for o in u.prove(model, props=u.CAP_PROPERTIES) if o.kind == "safety"}
    assert all(o.verdict == "ok" for o in outs.values()), [o.line() for o in outs.values()]
    planted = {o.name: o for o in u.prove(u.Model(policy, True, "fair_scheduled_set", release="0.33"),
                                          props=u.CAP_PROPERTIES) if o.kind == "safety"}
    assert planted["running_lora_cap"].verdict == "fail", planted["running_lora_cap"].line()


# ---- 0.33's stock cap under async, throttle and skips: the searches that break 0.32 ----

def _on_033(s):
    cfg, wl = s
    return replace(cfg, vllm="0.33"), wl


@settings(max_examples=300, deadline=None)
@given(throttled_streams().map(_on_033))
def test_033_cap_holds_under_its_prefill_cadence(scenario):
    """test_search_violations' throttle search finds 0.32's batch-cap break; on 0.33 none holds."""
    assert not _breaks_batch_cap(scenario)


@settings(max_examples=300, deadline=None)
@given(lora_skips().map(_on_033))
def test_033_caps_hold_with_skipped_running_requests(scenario):
    assert not _breaks_batch_cap(scenario)
    assert not _running_lora_cap_broken(*scenario)


@settings(max_examples=300, deadline=None)
@given(scenarios(policy="vllm", async_scheduling=True).map(_on_033))
def test_033_running_cap_holds_under_async(scenario):
    assert not _running_lora_cap_broken(*scenario)


# ---- the CLI ------------------------------------------------------------------------

def _cli(*args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "lora_sched.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


@pytest.mark.parametrize("flag, want", [((), "0.34"), (("--vllm", "0.32"), "0.32"), (("--vllm", "0.33"), "0.33"),
                                        (("--vllm", "0.34"), "0.34")])
def test_simulate_takes_the_release_and_check_follows_it(tmp_path, flag, want):
    out = tmp_path / "t.jsonl"
    sim = _cli("simulate", "--policy", "vllm", "--scenario", "priority", "--out", str(out), *flag)
    assert sim.returncode == 0 and f"(vLLM {want})" in sim.stdout, sim.stdout + sim.stderr
    assert read_trace(out).config.vllm == want
    chk = _cli("check", str(out), "--policy", "vllm")
    assert chk.returncode == 0 and f"vLLM {want} semantics" in chk.stdout, chk.stdout


def test_simulate_refuses_an_unknown_release(tmp_path):
    sim = _cli("simulate", "--vllm", "0.35", "--out", str(tmp_path / "t.jsonl"))
    assert sim.returncode == 2 and "--vllm: invalid choice: '0.35'" in sim.stderr and "'0.34'" in sim.stderr


def test_check_judges_an_unregistered_release_without_a_replay(tmp_path):
    """A trace recorded on a vLLM the registry lacks: `check` judges every
    property (blocking's no_hol_blocking violation is still found) and says
    the replay is off; `check --policy` has no reference and says so in one
    line, exit 2."""
    ref = tmp_path / "ref.jsonl"
    assert _cli("simulate", "--scenario", "seed", "--policy", "blocking", "--vllm", "0.34",
                "--out", str(ref)).returncode == 0
    path = tmp_path / "t.jsonl"
    path.write_text(ref.read_text().replace('"source":"lora-sched reference"', '"source":"vllm 0.40.1"', 1))
    chk = _cli("check", str(path))
    assert chk.returncode == 1 and "no_hol_blocking ... VIOLATED at step 1" in chk.stdout, chk.stdout
    assert "capacity ... ok" in chk.stdout
    assert ("replay: off: vLLM 0.40.1 is not in the release registry (supported: 0.32.x, 0.33.x, 0.34.x); "
            "the properties are judged with vLLM 0.34's semantics") in chk.stdout, chk.stdout
    js = json.loads(_cli("check", str(path), "--json").stdout)
    assert "0.40.1" in js["replay_off"] and "replay" not in js
    rep = _cli("check", str(path), "--policy", "blocking")
    assert rep.returncode == 2 and rep.stdout == "", rep.stdout
    assert rep.stderr.count("\n") == 1 and "--policy blocking: the trace was recorded on vLLM 0.40.1, which the " \
        "release registry lacks" in rep.stderr, rep.stderr


