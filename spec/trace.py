"""The `lora-sched-trace` format, version 1 (DESIGN section 5).

JSON Lines, one event a line: a `header`, then `arrive`, `abort` and `step`
events. `TraceWriter` flushes every line so a crash loses nothing;
`read_trace` is strict: a malformed or inconsistent trace raises `TraceError`
naming the file, the line and the reason.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from spec.config import Config, ConfigError
from spec.request import Request, RequestError
from spec.state import StepRecord

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
    """Read and validate a trace.

    Structural checks (JSON, kinds, field types) and consistency checks: each
    id arrives once; a step names only arrived requests; `admitted` requests
    were waiting, `scheduled` ones running or admitted, `preempted` ones
    running; the waiting and running sets agree with the events before;
    scheduled tokens fit `max_num_batched_tokens`; step numbers increase.

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
    trace = Trace(spath, config, str(head.get("source", "")), head, complete=complete)

    known: dict[str, Request] = {}
    where: dict[str, str] = {}  # id -> pending | waiting | running | finished | aborted
    pending: list[str] = []  # arrived, not yet seen by a step
    last_step = 0
    deferred_finish: list[str] = []  # async: finishes applied one step late
    aborts: list[tuple[int, str]] = []  # applied when the step they name starts

    for n, obj in parsed[1:]:
        def err(reason: str, n: int = n) -> TraceError:
            return TraceError(spath, n, reason)

        kind = obj.get("kind")
        if kind == "arrive":
            step = _get(obj, "step", int, err)
            rid = _get(obj, "id", str, err)
            if rid in known:
                raise err(f"request {rid!r} arrives twice")
            if step <= last_step:
                raise err(f"arrival at step {step} is not after step {last_step}, already scheduled")
            try:
                req = Request(rid, _get(obj, "adapter", int, err), _get(obj, "prompt_tokens", int, err),
                              _get(obj, "max_tokens", int, err), step, obj.get("priority", 0))
            except RequestError as exc:
                raise err(str(exc)) from None
            known[rid] = req
            where[rid] = "pending"
            pending.append(rid)
            trace.events.append(Arrive(n, step, req))
        elif kind == "abort":
            step = _get(obj, "step", int, err)
            rid = _get(obj, "id", str, err)
            if rid not in known:
                raise err(f"abort of unknown request {rid!r}")
            if step <= last_step:
                raise err(f"abort at step {step} is not after step {last_step}")
            aborts.append((step, rid))
            trace.events.append(Abort(n, step, rid))
        elif kind == "step":
            step = _get(obj, "step", int, err)
            if step <= last_step:
                raise err(f"step {step} out of order: it follows step {last_step}")
            waiting = _id_list(obj, "waiting", err)
            running = _id_list(obj, "running", err)
            sched_raw = _get(obj, "scheduled", dict, err)
            admitted = _id_list(obj, "admitted", err)
            preempted = _id_list(obj, "preempted", err)
            finished = _id_list(obj, "finished", err)
            scheduled: dict[str, int] = {}
            for rid, tok in sched_raw.items():
                if isinstance(tok, bool) or not isinstance(tok, int) or tok < 1:
                    raise err(f"scheduled tokens for {rid!r} must be a positive integer, got {tok!r}")
                scheduled[rid] = tok
            for rid in [*waiting, *running, *scheduled, *admitted, *preempted, *finished]:
                if rid not in known:
                    raise err(f"unknown request {rid!r}")
            for rid in list(pending):
                if known[rid].arrival <= step:
                    where[rid] = "waiting"
                    pending.remove(rid)
            for a_step, rid in list(aborts):
                if a_step <= step:
                    aborts.remove((a_step, rid))
                    if where[rid] in ("waiting", "running"):
                        where[rid] = "aborted"
            for rid in [*waiting, *running]:
                if where[rid] == "pending":
                    raise err(f"request {rid!r} is listed before its arrival step {known[rid].arrival}")
            exp_wait = {r for r, w in where.items() if w == "waiting"}
            exp_run = {r for r, w in where.items() if w == "running"}
            if set(waiting) != exp_wait:
                raise err(_set_diff("waiting", set(waiting), exp_wait))
            if set(running) != exp_run:
                raise err(_set_diff("running", set(running), exp_run))
            for rid in admitted:
                if where[rid] != "waiting":
                    what = "admitted twice" if where[rid] == "running" else f"admitted while {where[rid]}"
                    raise err(f"request {rid!r} {what}")
            for rid in preempted:
                if where[rid] != "running":
                    raise err(f"request {rid!r} preempted while {where[rid]}")
            for rid in scheduled:
                if rid in preempted or (where[rid] != "running" and rid not in admitted):
                    raise err(f"request {rid!r} scheduled while not running")
            for rid in admitted:
                if rid not in scheduled:
                    raise err(f"request {rid!r} admitted but not scheduled")
            total = sum(scheduled.values())
            if total > config.max_num_batched_tokens:
                raise err(f"tokens over budget: {total} scheduled > max_num_batched_tokens "
                          f"{config.max_num_batched_tokens}")
            for rid in finished:
                if rid not in scheduled:
                    raise err(f"request {rid!r} finished without being scheduled this step")
            for rid in preempted:
                where[rid] = "waiting"
            for rid in admitted:
                where[rid] = "running"
            if config.async_scheduling:
                done, deferred_finish = deferred_finish, list(finished)
            else:
                done = list(finished)
            for rid in done:
                if where[rid] in ("running", "waiting"):
                    where[rid] = "finished"
            last_step = step
            throttle = obj.get("throttle", False)
            if not isinstance(throttle, bool):
                raise err(f"field 'throttle' must be true or false, got {throttle!r}")
            trace.events.append(Step(n, StepRecord(step, waiting, running, scheduled, admitted,
                                                   preempted, finished, throttle)))
        elif kind == "header":
            raise err("a second header line")
        else:
            raise err(f"unknown event kind {kind!r} (expected arrive, abort or step)")
    return trace


def _set_diff(name: str, got: set[str], want: set[str]) -> str:
    extra, missing = sorted(got - want), sorted(want - got)
    parts = []
    if extra:
        parts.append(f"lists {', '.join(map(repr, extra))} which the events before do not put there")
    if missing:
        parts.append(f"misses {', '.join(map(repr, missing))}")
    return f"inconsistent {name}: " + "; ".join(parts)
