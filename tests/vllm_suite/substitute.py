"""pytest plugin: vLLM's own scheduler tests, with a scheduler class substituted.

Loaded by `tests/vllm_suite/run.py` into a pytest run over vLLM's test
files (`-p substitute`). `LORA_SCHED_SUBSTITUTE` says what every scheduler
the tests build becomes, as `--scheduler-cls` would make it:

- `stock`: nothing substituted (vLLM's `Scheduler` and `AsyncScheduler`);
- `stock-async`: vLLM's `AsyncScheduler` for every scheduler;
- `fair`: `FairScheduler` for vLLM's `Scheduler`, `AsyncFairScheduler` for its
  `AsyncScheduler`;
- `fair-async`: `AsyncFairScheduler` for every scheduler.

The substitution replaces the two names in vLLM's modules before any test
module imports them. That it took effect is asserted, not assumed: vLLM's
own `Scheduler.__init__` is wrapped to record the class of every scheduler
built, per test; the record goes to `LORA_SCHED_SUBSTITUTE_LOG` (JSON), and
a test that builds a scheduler of any other class fails at teardown.

It also supplies the two fixtures vLLM's `tests/conftest.py` would (that
conftest imports far more than these tests need, so the run skips it).
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

MODES = ("stock", "stock-async", "fair", "fair-async")
_built: list[str] = []  # classes built during the current test
_per_test: dict[str, list[str]] = {}
_wanted: tuple[type, ...] = ()


def _mode() -> str:
    mode = os.environ.get("LORA_SCHED_SUBSTITUTE", "stock")
    if mode not in MODES:
        raise pytest.UsageError(f"LORA_SCHED_SUBSTITUTE={mode!r}: expected one of {', '.join(MODES)}")
    return mode


def pytest_configure(config: pytest.Config) -> None:
    global _wanted
    import vllm.v1.core.sched.async_scheduler as vasync
    import vllm.v1.core.sched.scheduler as vsched

    base, abase = vsched.Scheduler, vasync.AsyncScheduler
    mode = _mode()
    if mode.startswith("fair"):
        from lora_sched.scheduler import AsyncFairScheduler, FairScheduler

        sync_cls = AsyncFairScheduler if mode == "fair-async" else FairScheduler
        async_cls = AsyncFairScheduler
    else:
        sync_cls = abase if mode == "stock-async" else base
        async_cls = abase
    vsched.Scheduler, vasync.AsyncScheduler = sync_cls, async_cls
    _wanted = (sync_cls, async_cls)
    init = base.__init__

    def recorded_init(self: Any, *args: Any, **kwargs: Any) -> None:
        _built.append(type(self).__qualname__)
        init(self, *args, **kwargs)

    base.__init__ = recorded_init  # type: ignore[method-assign]
    config.addinivalue_line("markers", "substituted: a scheduler test run with lora_sched's substitution")


@pytest.fixture(autouse=True)
def _substitution_took_effect(request: pytest.FixtureRequest) -> Iterator[None]:
    _built.clear()
    yield
    _per_test[request.node.nodeid] = list(_built)
    wanted = {cls.__qualname__ for cls in _wanted}
    stray = sorted(set(_built) - wanted)
    # A test may build its own subclass of the substituted class (a test-local
    # class): only vLLM's own two are required to be replaced.
    stray = [name for name in stray if name in ("Scheduler", "AsyncScheduler")]
    assert not stray, f"built {stray} where the substitution wants {sorted(wanted)}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get("LORA_SCHED_SUBSTITUTE_LOG")
    if not path:
        return
    counts = Counter(name for built in _per_test.values() for name in built)
    tests = Counter(name for built in _per_test.values() for name in set(built))
    with open(path, "w") as f:
        json.dump({"mode": _mode(), "constructions": counts, "tests_building": tests, "per_test": _per_test}, f)


@pytest.fixture()
def temporary_enable_log_propagate() -> Iterator[None]:
    logger = logging.getLogger("vllm")
    previous = logger.propagate
    logger.propagate = True
    yield
    logger.propagate = previous


@pytest.fixture()
def caplog_vllm(temporary_enable_log_propagate: None, caplog: pytest.LogCaptureFixture) -> Iterator[Any]:
    with caplog.at_level(logging.INFO):
        yield caplog
