"""The `lora-sched-trace` format, version 1 (DESIGN section 5).

JSON Lines, one event a line: a `header`, then `arrive`, `abort` and `step`
events (`docs/trace.schema.json` is the JSON Schema of each line).
`TraceWriter` flushes every line so a crash loses nothing; `read_trace`
checks structure and references: a malformed trace raises `TraceError`
naming the file, the line and the reason. What a trace says the scheduler
did is judged by the properties (`spec.check`), not by the reader.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from lora_sched.spec import releases
from lora_sched.spec.config import Config, ConfigError
from lora_sched.spec.request import Request, RequestError
from lora_sched.spec.state import StepRecord

FORMAT = "lora-sched-trace"
VERSION = 1


class TraceError(ValueError):
    """A malformed or inconsistent trace: `path:line: reason`."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path, self.line, self.reason = path, line, reason


@dataclass
class Arrive:
    line: int
    step: int
    req: Request


@dataclass
class Abort:
    line: int
    step: int
    id: str


@dataclass
class Step:
    line: int
    rec: StepRecord


Event = Arrive | Abort | Step


@dataclass
class Trace:
    path: str
    config: Config
    source: str
    header: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    complete: bool = True  # False when the reader stopped at a truncated tail

    def requests(self) -> dict[str, Request]:
        return {e.req.id: e.req for e in self.events if isinstance(e, Arrive)}

    def steps(self) -> list[StepRecord]:
        return [e.rec for e in self.events if isinstance(e, Step)]


class TraceWriter:
    """Writes one event a line and flushes it (and fsyncs on close)."""

    def __init__(self, path: str | os.PathLike[str], config: Config, source: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f: IO[str] = open(self.path, "w", encoding="utf-8")
        self._emit({"kind": "header", "format": FORMAT, "version": VERSION,
                    "source": source, "config": config.to_dict()})

    def _emit(self, obj: dict[str, Any]) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._f.flush()

    def arrive(self, req: Request, step: int) -> None:
        d = req.to_dict()
        self._emit({"kind": "arrive", "step": step, "id": d["id"], "adapter": d["adapter"],
                    "prompt_tokens": d["prompt_tokens"], "max_tokens": d["max_tokens"],
                    "priority": d["priority"]})

    def abort(self, rid: str, step: int) -> None:
        self._emit({"kind": "abort", "step": step, "id": rid})

    def step(self, rec: StepRecord) -> None:
        self._emit(rec.to_json())

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- reading ---------------------------------------------------------------

def _release(head: dict[str, Any], source: str, err) -> str:
    """The vLLM release a header selects: the one its `source` names (a
    recorded trace: `vllm 0.33.0`), else its config's `vllm` key (a reference
    trace), else `releases.LEGACY`. Both given and different: inconsistent."""
    try:
        named = releases.from_source(source)
    except releases.UnknownRelease as exc:
        raise err(f"source {source!r}: {exc}") from None
    raw = head.get("config", {})
    keyed = raw.get("vllm") if isinstance(raw, dict) else None
    if named is not None and keyed is not None and keyed != named:
        raise err(f"source {source!r} names vLLM {named} but config says vllm {keyed!r}")
    return named or keyed or releases.LEGACY


def _get(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], err) -> Any:
    if key not in obj:
        raise err(f"missing field {key!r}")
    value = obj[key]
    if isinstance(value, bool) and kind is not bool:
        raise err(f"field {key!r} must be {_kind_name(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise err(f"field {key!r} must be {_kind_name(kind)}, got {value!r}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", str: "a string", list: "a list", dict: "an object"}
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)


def _id_list(obj: dict[str, Any], key: str, err) -> list[str]:
    ids = _get(obj, key, list, err)
    for x in ids:
        if not isinstance(x, str):
            raise err(f"field {key!r} must list request ids (strings), got {x!r}")
    if len(set(ids)) != len(ids):
        dup = next(x for x in ids if ids.count(x) > 1)
        raise err(f"field {key!r} lists request {dup!r} twice")
    return ids


def iter_lines(path: str) -> Iterator[tuple[int, str]]:
    with open(path, encoding="utf-8") as f:
        yield from enumerate(f, 1)


def read_trace(path: str | os.PathLike[str], *, allow_truncated_tail: bool = False) -> Trace:
    """Read a trace, checking its structure and references only.

    Rejected (`TraceError`, the CLI's exit 2): a line that is not a JSON
    object; a missing or wrong header (format, version, config); an unknown
    event kind; a missing field or one of the wrong type; a negative step; a
    request id listed twice in one field, arriving twice, or not arrived yet
    (unknown, or its arrival step after the step that names it); step numbers
    that do not increase; an arrival or abort for a step whose line was
    already written. The first step may be any number >= 0, and steps may
    jump over idle ones.

    Not judged here: whether the lists agree with the events before, whether
    a step admits only waiting requests, fits the budget, the seats or the KV
    blocks... Those are the properties of `spec.properties` (`conservation`,
    `capacity`, ...), which `spec.check` reports as violations (exit 1), so a
    broken recorder is told apart from a scheduler that broke a property.

    `allow_truncated_tail`: a crash can cut the last line short; when set, an
    unparsable *final* line is dropped and `Trace.complete` is False.
    """
    spath = str(path)
    try:
        lines = list(iter_lines(spath))
    except OSError as exc:
        raise TraceError(spath, 0, f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(spath, 0, f"not UTF-8 text: {exc.reason}") from None
    if not lines:
        raise TraceError(spath, 1, "empty file: expected a header line")

    complete = True
    parsed: list[tuple[int, dict[str, Any]]] = []
    for n, raw in lines:
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            if allow_truncated_tail and n == lines[-1][0] and not raw.endswith("\n"):
                complete = False
                break
            raise TraceError(spath, n, f"bad JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise TraceError(spath, n, "expected a JSON object")
        parsed.append((n, obj))
    if not parsed:
        raise TraceError(spath, 1, "no header line")

    n0, head = parsed[0]

    def err0(reason: str) -> TraceError:
        return TraceError(spath, n0, reason)

    if head.get("kind") != "header":
        raise err0(f"first line must be the header, got kind {head.get('kind')!r}")
    if head.get("format") != FORMAT:
        raise err0(f"format must be {FORMAT!r}, got {head.get('format')!r}")
    if head.get("version") != VERSION:
        raise err0(f"unsupported version {head.get('version')!r} (this reader knows {VERSION})")
    try:
        config = Config.from_dict(head.get("config", {}))
    except ConfigError as exc:
        raise err0(str(exc)) from None
    source = head.get("source", "")
    if not isinstance(source, str):
        raise err0(f"field 'source' must be a string, got {source!r}")
    config = replace(config, vllm=_release(head, source, err0))
    trace = Trace(spath, config, source, head, complete=complete)

    known: dict[str, Request] = {}
    last_step: int | None = None  # the last step line read

    for n, obj in parsed[1:]:
        def err(reason: str, n: int = n) -> TraceError:
            return TraceError(spath, n, reason)

        kind = obj.get("kind")
        if kind in ("arrive", "abort", "step"):
            step = _get(obj, "step", int, err)
            if step < 0:
                raise err(f"field 'step' must be >= 0, got {step}")
        if kind == "arrive":
            rid = _get(obj, "id", str, err)
            if rid in known:
                raise err(f"request {rid!r} arrives twice")
            if last_step is not None and step <= last_step:
                raise err(f"arrival at step {step} comes after the line of step {last_step}: "
                          "a step's arrivals precede its line")
            try:
                req = Request(rid, _get(obj, "adapter", int, err), _get(obj, "prompt_tokens", int, err),
                              _get(obj, "max_tokens", int, err), step, obj.get("priority", 0))
            except RequestError as exc:
                raise err(str(exc)) from None
            known[rid] = req
            trace.events.append(Arrive(n, step, req))
        elif kind == "abort":
            rid = _get(obj, "id", str, err)
            if rid not in known:
                raise err(f"abort of unknown request {rid!r}")
            if step < known[rid].arrival:
                raise err(f"abort of {rid!r} at step {step}, before its arrival step {known[rid].arrival}")
            if last_step is not None and step <= last_step:
                raise err(f"abort at step {step} comes after the line of step {last_step}: "
                          "a step's aborts precede its line")
            trace.events.append(Abort(n, step, rid))
        elif kind == "step":
            if last_step is not None and step <= last_step:
                raise err(f"step {step} out of order: it follows step {last_step}")
            waiting = _id_list(obj, "waiting", err)
            running = _id_list(obj, "running", err)
            sched_raw = _get(obj, "scheduled", dict, err)
            admitted = _id_list(obj, "admitted", err)
            preempted = _id_list(obj, "preempted", err)
            finished = _id_list(obj, "finished", err)
            if "throttle" in obj and not isinstance(obj["throttle"], bool):
                raise err(f"field 'throttle' must be true or false, got {obj['throttle']!r}")
            scheduled: dict[str, int] = {}
            for rid, tok in sched_raw.items():
                if isinstance(tok, bool) or not isinstance(tok, int) or tok < 1:
                    raise err(f"scheduled tokens for {rid!r} must be a positive integer, got {tok!r}")
                scheduled[rid] = tok
            for rid in [*waiting, *running, *scheduled, *admitted, *preempted, *finished]:
                if rid not in known:
                    raise err(f"unknown request {rid!r}")
                if known[rid].arrival > step:
                    raise err(f"request {rid!r} is listed before its arrival step {known[rid].arrival}")
            last_step = step
            trace.events.append(Step(n, StepRecord(step, waiting, running, scheduled, admitted,
                                                   preempted, finished, obj.get("throttle", False))))
        elif kind == "header":
            raise err("a second header line")
        else:
            raise err(f"unknown event kind {kind!r} (expected arrive, abort or step)")
    return trace


