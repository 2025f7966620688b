"""A user's scheduler class: loaded by its path, refused in one line, recorded, judged.

- `conformance.target.load` resolves `pkg.module.Class` and `file.py:Class`;
  each way a class cannot be driven (a missing file, an import that raises, a
  missing attribute, not a class, not a vLLM `Scheduler`, a constructor vLLM's
  engine call does not fit) is a `TargetError` of one line naming the path
  and what is wrong, and `fuzz` / `conform` print `error: ...` and exit 2.
- The recorded class keeps the class's decisions and writes a trace whose
  source names the installed vLLM (the release registry reads it unchanged)
  and the class; an `AsyncScheduler` subclass is driven asynchronously.
- `run_case` on a user's class: a crash inside its `schedule()`, garbage
  returned from it, a recorder it breaks are findings with their source
  line, never an exception in the harness; a property it is not expected to
  keep is evidence, not a finding.
- `conform --in-process --scheduler-cls` judges one scenario, replay off.
- `bounded_wait` by growth: stock vLLM's wait grows with the stream (the
  skip rule starves adapter 3), `FairScheduler`'s is flat.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from lora_sched.conformance.target import TargetError, load, normalise
from lora_sched.fuzz.lora_space import generate_lora
from lora_sched.fuzz.runner import run_case
from lora_sched.spec import releases
from lora_sched.spec.trace import read_trace

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

BAD = textwrap.dedent('''
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.sched.interface import SchedulerInterface


    class NotAScheduler:
        pass


    class Positional(Scheduler):
        def __init__(self, vllm_config, kv_cache_config):
            super().__init__(vllm_config, kv_cache_config, None, 16)


    class InterfaceOnly(SchedulerInterface):
        pass


    class Raises(Scheduler):
        def schedule(self, *args, **kwargs):
            raise ValueError("my scheduler gave up")


    class Garbage(Scheduler):
        def schedule(self, *args, **kwargs):
            super().schedule(*args, **kwargs)
            return None


    class Ghost(Scheduler):
        """Reports a request the engine never sent as scheduled."""

        def schedule(self, *args, **kwargs):
            out = super().schedule(*args, **kwargs)
            out.num_scheduled_tokens["ghost"] = 1
            return out


    class Unrecordable(Scheduler):
        """Leaves each new request with a prompt of no tokens, which no trace can hold."""

        def add_request(self, request):
            super().add_request(request)
            request.num_prompt_tokens = 0


    NUMBER = 3
''')


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("classes")
    (d / "mine.py").write_text(BAD)
    (d / "broken.py").write_text("import no_such_module_anywhere\n")
    return d / "mine.py"


@pytest.mark.parametrize("name, message", [
    ("NotAScheduler", "not a subclass of vllm.v1.core.sched.interface.SchedulerInterface"),
    ("InterfaceOnly", "does not subclass vllm.v1.core.sched.scheduler.Scheduler"),
    ("Positional", "vLLM's engine core calls Positional(vllm_config=..., kv_cache_config=..., "
                   "structured_output_manager=..."),
    ("NUMBER", "not a class (a int)"),
    ("Missing", "has no attribute 'Missing'"),
])
def test_a_class_vllm_could_not_drive_is_refused_in_one_line(bad, name, message):
    path = f"{bad}:{name}"
    with pytest.raises(TargetError) as err:
        load(path)
    text = str(err.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text, text


@pytest.mark.parametrize("path, message", [
    ("{d}/nowhere.py:X", "no such file"),
    ("{d}/broken.py:X", "raised ModuleNotFoundError: No module named 'no_such_module_anywhere'"),
    ("no_such_pkg.mod.Cls", "cannot import module no_such_pkg.mod"),
    ("lora_sched.scheduler.NoSuchScheduler", "module lora_sched.scheduler has no attribute 'NoSuchScheduler'"),
    ("JustAName", "expected pkg.module.Class or path/to/file.py:Class"),
])
def test_a_path_that_does_not_resolve_is_refused_in_one_line(bad, path, message):
    path = path.format(d=bad.parent)
    with pytest.raises(TargetError, match=message) as err:
        load(path)
    assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value)


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """`lora-sched ARGV` in this process (vLLM is imported already): exit code,
    stdout, stderr. An exception the CLI does not turn into `error: ...`
    propagates and fails the test."""
    from lora_sched.cli import main

    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_clis_print_the_error_and_exit_2(bad, capsys):
    for argv in (["fuzz", "--count", "1", "--scheduler-cls", f"{bad}:NotAScheduler"],
                 ["conform", "--in-process", "--scheduler-cls", f"{bad}:NotAScheduler"]):
        code, _, err = cli(capsys, *argv)
        errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert code == 2, err[-2000:]
        assert len(errors) == 1 and "NotAScheduler is not a vLLM scheduler" in errors[0], err[-2000:]


def test_the_recorded_class_names_vllm_and_the_class_in_its_source(tmp_path):
    import vllm

    t = load("lora_sched.scheduler.FairScheduler")
    assert t.policy == "fair" and not t.is_async  # the project's classes keep their policy
    stock = load("vllm.v1.core.sched.async_scheduler.AsyncScheduler")
    assert stock.is_async and stock.policy == "vllm"
    path = f"{EXAMPLES / 'step_counter.py'}:StepCounter"
    case = generate_lora(3, path, release=releases.modelled(vllm.__version__))
    res = run_case(case, tmp_path / "t.jsonl")
    assert res.failures == [], [f.message for f in res.failures]
    trace = read_trace(tmp_path / "t.jsonl")
    assert trace.source == f"vllm {vllm.__version__}; scheduler {path}"
    assert releases.from_source(trace.source) == trace.config.vllm and trace.unregistered is None
    assert trace.config.policy == "vllm" and trace.steps()


@pytest.mark.parametrize("name, signature, where", [
    ("Raises", "crash:ValueError@mine.py:schedule:Raises", "mine.py:21: raise ValueError"),
    ("Garbage", "crash:AttributeError@recorder.py:schedule:Garbage", "recorder.py"),
    ("Unrecordable", "crash:RecordingBroken@recorder.py:_rec_fail:Unrecordable", "arriving: RequestError"),
    ("Ghost", "trace-error:TraceError@trace.py:__iter__:Ghost", "unknown request 'ghost'"),
])
def test_whatever_the_class_does_is_a_finding_not_a_harness_error(bad, tmp_path, name, signature, where):
    path = f"{bad}:{name}"
    res = run_case(generate_lora(0, path), tmp_path / "t.jsonl")
    assert signature in res.signatures, [f.message for f in res.failures]
    crash = next(f for f in res.failures if f.signature == signature)
    assert where in crash.message, crash.message


def test_unexpected_properties_are_evidence_and_expect_makes_them_findings(tmp_path):
    path = f"{EXAMPLES / 'blocking_scan.py'}:BlockingScan"
    plain = run_case(generate_lora(0, path), tmp_path / "a.jsonl")
    assert plain.failures == [] and {f.name for f in plain.evidence} == {"no_hol_blocking"}
    expected = run_case(generate_lora(0, path, expect=("no_hol_blocking",)), tmp_path / "b.jsonl")
    assert expected.signatures == {"property:no_hol_blocking:BlockingScan"} and expected.evidence == []


def test_conform_judges_a_user_class_without_a_replay(tmp_path, capsys):
    path = f"{EXAMPLES / 'blocking_scan.py'}:BlockingScan"
    run = ["conform", "--in-process", "--scenario", "seed", "--scheduler-cls", path, "--out", str(tmp_path)]
    code, out, err = cli(capsys, *run)
    assert code == 0, out + err[-2000:]
    assert "violated, not expected (evidence): no_hol_blocking" in out
    assert f"replay: off: no reference model for {path}" in out
    code, out, _ = cli(capsys, *run, "--expect", "no_hol_blocking")
    assert code == 1 and "EXPECTED PROPERTIES VIOLATED: no_hol_blocking" in out


def test_bounded_wait_by_growth_stock_starves_fair_is_flat():
    from lora_sched.fuzz.growth import growth

    stock = growth(load("vllm.v1.core.sched.scheduler.Scheduler"), families=("starvation",))
    (fam,) = stock.families
    assert fam.grows and fam.who[-1] == "victim-a3", fam.line()
    fair = growth(load("lora_sched.scheduler.FairScheduler"), families=("starvation",))
    assert not fair.starving and fair.families[0].waits[0] == fair.families[0].waits[-1], fair.families[0].line()


def test_normalise_makes_a_file_form_absolute():
    assert normalise("examples/x.py:C") == f"{Path('examples/x.py').resolve()}:C"
    assert normalise("pkg.mod.C") == "pkg.mod.C"


def test_recorded_wraps_any_class_named_in_additional_config(tmp_path):
    """`--scheduler-cls lora_sched.recorder.Recorded` builds the class its own config key names, recorded."""
    from lora_sched.conformance.inprocess import _VLLM_CONFIG_CACHE, make_scheduler
    from lora_sched.spec.config import Config
    from vllm.v1.core.sched.scheduler import Scheduler

    from lora_sched.recorder import Recorded, RecorderMixin

    cfg = Config(max_loras=3, max_num_seqs=7, max_num_batched_tokens=77)
    with pytest.raises(ValueError, match="lora_sched_record"):
        make_scheduler(cfg, scheduler_class=Recorded)
    vc = next(v for k, v in _VLLM_CONFIG_CACHE.items() if k[1:4] == (3, 7, 77))
    try:
        vc.additional_config["lora_sched_record"] = {"scheduler_cls": "vllm.v1.core.sched.scheduler.Nope"}
        with pytest.raises(ValueError, match="cannot be loaded"):
            make_scheduler(cfg, scheduler_class=Recorded)
        vc.additional_config["lora_sched_record"] = {"scheduler_cls": "vllm.v1.core.sched.scheduler.Scheduler"}
        sched = make_scheduler(cfg, scheduler_class=Recorded)
    finally:
        vc.additional_config.pop("lora_sched_record", None)
    assert isinstance(sched, Scheduler) and isinstance(sched, RecorderMixin)
    assert sched.trace_source.endswith("; scheduler vllm.v1.core.sched.scheduler.Scheduler")
