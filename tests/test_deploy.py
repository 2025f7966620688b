"""The shipped scheduler classes: structural hook, refusal on unknown vLLM, settings.

The classes' behaviour is checked step for step against the reference by the
in-process conformance tests and, with the README's own command line, by
`tests/test_conformance_live.py::test_readme_deploy_command`.
"""

from __future__ import annotations

import inspect

import pytest
from vllm.v1.core.sched.scheduler import Scheduler

from lora_sched import scheduler as deploy

SOURCE = inspect.getsource(Scheduler.schedule)


def test_hook_adds_two_calls_and_keeps_every_other_statement():
    fn = deploy.hook_schedule(SOURCE)
    names = set(fn.__code__.co_names)
    assert {"_lora_gate", "_before_waiting_scan"} <= names
    assert not {"_lora_gate", "_before_waiting_scan"} & set(Scheduler.schedule.__code__.co_names)
    # Every global and attribute vLLM's schedule() reads is still read.
    assert set(Scheduler.schedule.__code__.co_names) <= names


@pytest.mark.parametrize("change, what", [
    (("# Scheduling would exceed max_loras, skip.\n                    skip_request(request_queue)",
      "self._skip_for_lora(request_queue)"), "LoRA-cap"),
    (("while token_budget > 0:", "while token_budget >= 1 and True:"), "waiting-scan"),
])
def test_unknown_schedule_shape_refuses_to_load(change, what):
    """A vLLM whose schedule() no longer has the shapes the hooks need makes
    the import fail, naming the vLLM version and the supported range."""
    old, new = change
    assert old in SOURCE
    with pytest.raises(deploy.UnsupportedVllm) as info:
        deploy.hook_schedule(SOURCE.replace(old, new), version="0.99.0")
    msg = str(info.value)
    assert "vLLM 0.99.0" in msg and deploy.SUPPORTED_VLLM in msg and what in msg and "has 0" in msg


def test_duplicated_shape_refuses_to_load():
    body = SOURCE.split("\n", 1)[1]
    twice = SOURCE + "\n" + "    def schedule2(self):\n" + body
    with pytest.raises(deploy.UnsupportedVllm, match="has 2"):
        deploy.hook_schedule(twice, version="0.32.0")


class _Cfg:
    def __init__(self, extra):
        self.additional_config = extra


@pytest.mark.parametrize("extra, want", [
    ({}, 16),
    ({"lora_sched": {}}, 16),
    ({"lora_sched": {"starvation_steps": 0}}, 0),
    ({"lora_sched": {"starvation_steps": 40}, "other_plugin": {"x": 1}}, 40),
])
def test_settings(extra, want):
    assert deploy.settings_from(_Cfg(extra))["starvation_steps"] == want


@pytest.mark.parametrize("extra, needle", [
    ({"lora_sched": {"starvation_step": 4}}, "unknown lora_sched setting(s) ['starvation_step']"),
    ({"lora_sched": {"starvation_steps": -1}}, "lora_sched.starvation_steps must be an integer >= 0, got -1"),
    ({"lora_sched": {"starvation_steps": "16"}}, "got '16'"),
    ({"lora_sched": {"starvation_steps": True}}, "got True"),
    ({"lora_sched": 16}, "'lora_sched' must be an object"),
])
def test_bad_settings_are_named(extra, needle):
    with pytest.raises(ValueError) as info:
        deploy.settings_from(_Cfg(extra))
    assert needle in str(info.value)
