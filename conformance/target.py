"""A user's scheduler class, loaded by its path and made to record.

`load(path)` resolves `pkg.module.Class` (the form vLLM's `--scheduler-cls`
takes) or `path/to/file.py:Class` and validates it the way vLLM's engine core
would use it (docs/verify-your-scheduler.md); anything else is a
`TargetError` whose message is one line naming the path and what is wrong.
The loaded `Target` carries `recorded`: the class with
`lora_sched.recorder.RecorderMixin` in front, whose trace header names the
installed vLLM and the class and whose recorder raises instead of stopping
silently (`rec_strict`). A subclass of vLLM's `AsyncScheduler` runs async.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

from lora_sched.policy import claims
from lora_sched.spec.config import Config

SAFETY = ("batch_lora_cap", "running_lora_cap", "capacity", "conservation", "fifo_within_adapter")
LIVENESS = ("no_hol_blocking", "bounded_wait")
# The keywords vLLM's engine core passes (vllm/v1/engine/core.py, 0.32-0.34).
ENGINE_CALL = ("vllm_config", "kv_cache_config", "structured_output_manager", "include_finished_set",
               "log_stats", "block_size", "hash_block_size")
# The keywords `conformance.inprocess.make_scheduler` passes.
HARNESS_CALL = ("vllm_config", "kv_cache_config", "structured_output_manager", "block_size", "log_stats")


def expected(config: Config, expect: tuple[str, ...] | list[str] = ()) -> set[str]:
    """The properties whose violation in one trace is a finding: the safety
    ones the trace's policy claims under `config` (`policy.claims`: on 0.32
    stock vLLM gives up `running_lora_cap` under async scheduling, which is
    then no defect of a subclass), and those in `expect`; `bounded_wait` only
    where the policy has a reference bound (`fair`): a class without one is
    judged by growth (`fuzz.growth`)."""
    claimed = claims(config.policy, config)
    wanted = set(expect) - {"bounded_wait"} | ({"bounded_wait"} & set(expect) & claimed)
    return (set(SAFETY) & claimed) | wanted


class TargetError(ValueError):
    """A scheduler class that cannot be loaded or driven; one line naming the path."""


@dataclass(frozen=True)
class Target:
    """A validated scheduler class: `path` as given, the class, and its recorded subclass."""

    path: str
    cls: type
    recorded: type
    is_async: bool

    @property
    def name(self) -> str:
        return self.cls.__name__

    @property
    def policy(self) -> str:
        """The policy the trace header names: the project's own for its classes, else `vllm`."""
        return self.recorded.policy_name


def normalise(path: str) -> str:
    """`path` with a file form's file made absolute (workers and reproducers import it from anywhere)."""
    if ":" in path:
        file, _, name = path.rpartition(":")
        return f"{Path(file).resolve()}:{name}"
    return path


def _import(path: str) -> object:
    if ":" in path:
        file, _, name = path.rpartition(":")
        f = Path(file)
        if not name:
            raise TargetError(f"{path}: no class after ':' (expected path/to/file.py:Class)")
        if not f.is_file():
            raise TargetError(f"{path}: no such file {file}")
        mod_name = f"lora_sched_target_{zlib.crc32(str(f.resolve()).encode()):08x}_{f.stem}"
        module = sys.modules.get(mod_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(mod_name, f)
            if spec is None or spec.loader is None:
                raise TargetError(f"{path}: {file} is not a Python file")
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException as exc:
                del sys.modules[mod_name]
                raise TargetError(f"{path}: importing {file} raised {_one_line(exc)}") from None
        where = file
    else:
        mod, _, name = path.rpartition(".")
        if not mod or not name:
            raise TargetError(f"{path}: expected pkg.module.Class or path/to/file.py:Class")
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            raise TargetError(f"{path}: cannot import module {mod}: {_one_line(exc)}") from None
        except BaseException as exc:
            raise TargetError(f"{path}: importing {mod} raised {_one_line(exc)}") from None
        where = f"module {mod}"
    if not hasattr(module, name):
        raise TargetError(f"{path}: {where} has no attribute {name!r}")
    return getattr(module, name)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _check_class(path: str, obj: object) -> type:
    from vllm.v1.core.sched.interface import SchedulerInterface
    from vllm.v1.core.sched.scheduler import Scheduler

    if not isinstance(obj, type):
        raise TargetError(f"{path}: not a class (a {type(obj).__name__})")
    if not issubclass(obj, SchedulerInterface):
        raise TargetError(f"{path}: {obj.__name__} is not a vLLM scheduler "
                          "(not a subclass of vllm.v1.core.sched.interface.SchedulerInterface)")
    if not issubclass(obj, Scheduler):
        raise TargetError(f"{path}: {obj.__name__} implements SchedulerInterface but does not subclass "
                          "vllm.v1.core.sched.scheduler.Scheduler, whose queues the recorder reads")
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        raise TargetError(f"{path}: {obj.__name__} is abstract (unimplemented: {missing})")
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError) as exc:
        raise TargetError(f"{path}: {obj.__name__}'s constructor has no signature: {_one_line(exc)}") from None
    for who, call in (("vLLM's engine core", ENGINE_CALL), ("the in-process harness", HARNESS_CALL)):
        try:
            sig.bind(**{k: None for k in call})
        except TypeError as exc:
            raise TargetError(f"{path}: {who} calls {obj.__name__}({', '.join(f'{k}=...' for k in call)}), "
                              f"which its constructor rejects: {exc}") from None
    return obj


def _recorded(path: str, cls: type) -> type:
    from lora_sched.recorder import recorded_class

    return recorded_class(cls, path, strict=True)


_LOADED: dict[str, Target] = {}


def load(path: str) -> Target:
    """The validated scheduler class at `path` (cached per process), or `TargetError`."""
    got = _LOADED.get(path)
    if got is not None:
        return got
    if not isinstance(path, str) or not path.strip():
        raise TargetError(f"{path!r}: expected pkg.module.Class or path/to/file.py:Class")
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    cls = _check_class(path, _import(path))
    target = Target(path, cls, _recorded(path, cls), issubclass(cls, AsyncScheduler))
    _LOADED[path] = target
    return target
