"""The `lora-sched-trace` format, version 1 (DESIGN section 5).

JSON Lines, one event a line: a `header`, then `arrive`, `abort` and `step`
events (`docs/trace.schema.json` is the JSON Schema of each line).
`TraceWriter` flushes every line so a crash loses nothing; `TraceReader`
(one pass) and `read_trace` (in memory) check structure and references: a
malformed trace raises `TraceError` naming the file, the line and the reason.
What the scheduler did is judged by the properties (`policy.check`).
"""

from __future__ import annotations

import gzip
import io
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


@dataclass(slots=True)
class Arrive:
    line: int
    step: int
    req: Request


@dataclass(slots=True)
class Abort:
    line: int
    step: int
    id: str


@dataclass(slots=True)
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

    @property
    def unregistered(self) -> str | None:
        """The vLLM version `source` names when the registry lacks it (no replay)."""
        return releases.unregistered(self.source)


class TraceWriter:
    """Writes one event a line and flushes it (and fsyncs on close).

    A path ending in `.gz` is written gzip-compressed. `flush_every` lines are
    written between flushes (1: a crash loses nothing; more: faster). With
    `max_bytes`, `path` is a directory of segments `trace-000001.jsonl.gz`, ...
    (`.jsonl` with `compress=False`), each starting with the header line, a new
    one once the current one holds `max_bytes` on disk (checked at each flush).
    """

    def __init__(self, path: str | os.PathLike[str], config: Config, source: str, *, flush_every: int = 1,
                 max_bytes: int | None = None, compress: bool = True) -> None:
        self._header = {"kind": "header", "format": FORMAT, "version": VERSION,
                        "source": source, "config": config.to_dict()}
        self._flush_every = max(1, flush_every)
        self._unflushed = 0
        self._max_bytes = max_bytes
        self._segment = 0
        if max_bytes is not None:
            self.dir = Path(path)
            self.dir.mkdir(parents=True, exist_ok=True)
            self._suffix = ".jsonl.gz" if compress else ".jsonl"
            self._open(self._next_segment())
        else:
            self._open(Path(path))

    def _next_segment(self) -> Path:
        self._segment += 1
        return self.dir / f"trace-{self._segment:06d}{self._suffix}"

    def _open(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._gz = path.name.endswith(".gz")
        self._raw = open(path, "wb")
        stream = gzip.GzipFile(fileobj=self._raw, mode="wb", compresslevel=6) if self._gz else self._raw
        self._f: IO[str] = io.TextIOWrapper(stream, encoding="utf-8", write_through=False)
        self._emit(self._header)

    def _emit(self, obj: dict[str, Any]) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._unflushed += 1
        if self._unflushed >= self._flush_every:
            self._f.flush()
            self._unflushed = 0
            if self._max_bytes is not None and self._raw.tell() >= self._max_bytes:
                self._close_file()
                self._open(self._next_segment())

    def _close_file(self) -> None:
        self._f.flush()
        if self._gz:
            self._f.close()  # writes the gzip trailer; the file stays open
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._raw.close()

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
        if not self._raw.closed:
            self._close_file()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- reading ---------------------------------------------------------------

def _release(head: dict[str, Any], source: str, err) -> str:
    """The vLLM release a header selects: the one its `source` names (a recorded
    trace: `vllm 0.33.0`), else its config's `vllm` key, else `releases.LEGACY`;
    both given and different: inconsistent. A release the registry lacks selects
    `releases.NEWEST`'s semantics, with no reference (`releases.unregistered`)."""
    if releases.unregistered(source) is not None:
        named = releases.NEWEST
    else:
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
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise err(f"field {key!r} must be {_kind_name(kind)}, got {value!r}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", str: "a string", list: "a list", dict: "an object"}
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)


def _id_list(obj: dict[str, Any], key: str, err) -> list[str]:
    ids = _get(obj, key, list, err)
    if not ids:
        return ids
    for x in ids:
        if not isinstance(x, str):
            raise err(f"field {key!r} must list request ids (strings), got {x!r}")
    if len(ids) > 1 and len(set(ids)) != len(ids):
        dup = next(x for x in ids if ids.count(x) > 1)
        raise err(f"field {key!r} lists request {dup!r} twice")
    return ids


GZIP_MAGIC = b"\x1f\x8b"
_raw_decode = json.JSONDecoder().raw_decode
_BLANK = object()  # `TraceReader._parse`: a blank line


def _decode_json(raw: str) -> Any:
    """`json.loads(raw)` for one object followed by at most a newline, without
    `json.loads`' checks; anything else raises, and `json.loads` then judges."""
    obj, end = _raw_decode(raw)
    if end != len(raw) and raw[end:] != "\n":
        raise ValueError("more after the object")
    return obj


_INT = {int}
# The fast decoders (msgspec, the `fast` extra) return what `json.loads` would
# or raise, and the reader then asks `json.loads`, so a line's object and a bad
# line's error are json's. `_typed` decodes step and arrival lines into records
# whose types and bounds msgspec has checked (the reader checks order and
# references); any other line, or one it refuses, is read by `_decode`.
_typed: Any = None
try:
    import msgspec as _msgspec
except ImportError:  # pragma: no cover - depends on the environment
    _decode = _decode_json
else:
    from typing import Annotated

    _decode = _msgspec.json.Decoder().decode
    _Step0 = Annotated[int, _msgspec.Meta(ge=0)]
    _Tokens = Annotated[int, _msgspec.Meta(ge=1)]

    class _StepLine(_msgspec.Struct, tag_field="kind", tag="step", gc=False):
        step: _Step0
        waiting: list[str]
        running: list[str]
        scheduled: dict[str, _Tokens]
        admitted: list[str]
        preempted: list[str]
        finished: list[str]
        throttle: bool = False

    class _ArriveLine(_msgspec.Struct, tag_field="kind", tag="arrive", gc=False):
        step: _Step0
        id: str
        adapter: int
        prompt_tokens: int
        max_tokens: int
        priority: int = 0

    _typed = _msgspec.json.Decoder(_StepLine | _ArriveLine).decode


def open_text(path: str) -> IO[str]:
    """A trace file as text: plain JSON Lines, or gzip (told by its magic bytes, whatever its name)."""
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == GZIP_MAGIC:
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


SEGMENT_SUFFIXES = (".jsonl", ".jsonl.gz")


def segments(path: str) -> list[str]:
    """The files of a trace: the file itself, or a directory's `*.jsonl` and
    `*.jsonl.gz` files in name order (a rotating writer's segments,
    `RotatingTraceWriter`)."""
    if not os.path.isdir(path):
        return [path]
    files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(SEGMENT_SUFFIXES))
    if not files:
        raise TraceError(path, 0, "no trace files (*.jsonl, *.jsonl.gz) in the directory")
    return files


def iter_lines(path: str) -> Iterator[tuple[int, str]]:
    with open_text(path) as f:
        yield from enumerate(f, 1)


class TraceReader:
    """Reads a trace in one pass, one event at a time: the streaming form of `read_trace`.

    The constructor reads the header (`config`, `source`, `header`); iterating
    yields every event in file order, each checked as `read_trace` documents,
    and raises `TraceError` at the first malformed line (memory:
    docs/operator-scale.md). `complete`, `requests` and `steps` are final once
    the iteration is over.
    """

    def __init__(self, path: str | os.PathLike[str], *, allow_truncated_tail: bool = False) -> None:
        self.path = str(path)
        self.allow_truncated_tail = allow_truncated_tail
        self.complete = True
        self.requests = 0
        self.steps = 0
        self._files = segments(self.path)
        self.file = spath = self._files[0]  # the segment being read: errors name it
        try:
            self._lines = self._segment_lines()
            first = self._next_object()
        except OSError as exc:
            raise TraceError(spath, 0, f"cannot read: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise TraceError(spath, 0, f"not UTF-8 text: {exc.reason}") from None
        if first is None:
            raise TraceError(spath, 1, "empty file: expected a header line" if self._seen == 0 else "no header line")
        n0, head = first

        def err0(reason: str) -> TraceError:
            return TraceError(spath, n0, reason)

        if head.get("kind") != "header":
            raise err0(f"first line must be the header, got kind {head.get('kind')!r}")
        if head.get("format") != FORMAT:
            raise err0(f"format must be {FORMAT!r}, got {head.get('format')!r}")
        if head.get("version") != VERSION:
            raise err0(f"unsupported version {head.get('version')!r} (this reader knows {VERSION})")
        try:
            self.config = Config.from_dict(head.get("config", {}))
        except ConfigError as exc:
            raise err0(str(exc)) from None
        source = head.get("source", "")
        if not isinstance(source, str):
            raise err0(f"field 'source' must be a string, got {source!r}")
        self.config = replace(self.config, vllm=_release(head, source, err0))
        self.source = source
        self.header = head

    _seen = 0  # lines of the current segment read so far
    header: dict[str, Any] | None = None

    def _segment_lines(self) -> Iterator[tuple[int, str]]:
        """Every segment's lines in turn; a later segment's header line (the
        rotating writer starts each file with it) must repeat the first one's
        and is skipped."""
        for i, f in enumerate(self._files):
            self.file, self._seen = f, 0
            if i == 0:
                with open_text(f) as lines:
                    yield from enumerate(lines, 1)
                continue
            expect_header = True
            for n, raw in iter_lines(f):
                if expect_header and raw.strip():
                    expect_header = False
                    try:
                        same = json.loads(raw) == self.header
                    except json.JSONDecodeError:
                        same = False
                    if not same:
                        raise TraceError(f, n, "a segment must start with the trace's header line "
                                         f"(the one of {self._files[0]})")
                    continue
                yield n, raw

    def _next_object(self) -> tuple[int, dict[str, Any]] | None:
        """The next non-blank line as (line number, JSON object), or None at the end."""
        for n, raw in self._lines:
            self._seen = n
            obj = self._parse(n, raw)
            if obj is not _BLANK:
                return None if obj is None else (n, obj)
        return None

    def _parse(self, n: int, raw: str) -> Any:
        """Line `n` as a JSON object, `_BLANK` for a blank line, None for a
        truncated last line (`allow_truncated_tail`); else `TraceError`."""
        if not raw.strip():
            return _BLANK
        try:
            obj = _decode(raw)  # the common case, quickly (`_decode`); json's verdict otherwise
        except Exception:  # whatever the fast decoder says, json judges the line
            try:
                obj = json.loads(raw)  # leading whitespace, or json's exact error
            except json.JSONDecodeError as exc:
                # Only the trace's last line can lack its newline: a crash cut it short.
                if self.allow_truncated_tail and not raw.endswith("\n") and self.file == self._files[-1]:
                    self.complete = False
                    return None
                raise TraceError(self.file, n, f"bad JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise TraceError(self.file, n, "expected a JSON object")
        return obj

    def __iter__(self) -> Iterator[Event]:
        known: dict[str, int] = {}  # request id -> arrival step
        ahead: dict[str, int] = {}  # arrived since the last step line: id -> arrival step
        last_step: int | None = None  # the last step line read
        typed = _typed
        try:
            for n, raw in self._lines:
                self._seen = n
                # A step or arrival line that passes every check at once (msgspec's
                # typed decoding, else json's object checked in bulk) is yielded
                # here; any other line, or one that fails, is read field by field below.
                rec: StepRecord | None = None
                req: Request | None = None
                if typed is not None:
                    try:
                        line = typed(raw)
                    except Exception:  # not a step or arrival line, or a bad one: read below
                        line = None
                    if line is not None:
                        if type(line) is _StepLine:
                            rec = _typed_step(line, known, ahead, last_step)
                        else:
                            req = _typed_arrival(line, known, last_step)
                if rec is None and req is None:
                    obj = self._parse(n, raw)
                    if obj is _BLANK:
                        continue
                    if obj is None:  # a truncated last line
                        break
                    kind = obj.get("kind")
                    if kind == "step":
                        rec = _well_formed_step(obj, known, ahead, last_step)
                    elif kind == "arrive":
                        req = _well_formed_arrival(obj, known, last_step)
                if rec is not None:
                    last_step = rec.step
                    self.steps += 1
                    yield Step(n, rec)
                    continue
                if req is not None:
                    known[req.id] = ahead[req.id] = req.arrival
                    self.requests += 1
                    yield Arrive(n, req.arrival, req)
                    continue

                def err(reason: str, n: int = n) -> TraceError:
                    return TraceError(self.file, n, reason)

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
                    known[rid] = ahead[rid] = step
                    self.requests += 1
                    yield Arrive(n, step, req)
                elif kind == "abort":
                    rid = _get(obj, "id", str, err)
                    if rid not in known:
                        raise err(f"abort of unknown request {rid!r}")
                    if step < known[rid]:
                        raise err(f"abort of {rid!r} at step {step}, before its arrival step {known[rid]}")
                    if last_step is not None and step <= last_step:
                        raise err(f"abort at step {step} comes after the line of step {last_step}: "
                                  "a step's aborts precede its line")
                    yield Abort(n, step, rid)
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
                    for rid, tok in sched_raw.items():
                        if isinstance(tok, bool) or not isinstance(tok, int) or tok < 1:
                            raise err(f"scheduled tokens for {rid!r} must be a positive integer, got {tok!r}")
                    for ids in (waiting, running, sched_raw, admitted, preempted, finished):
                        for rid in ids:
                            arrival = known.get(rid)
                            if arrival is None:
                                raise err(f"unknown request {rid!r}")
                            if arrival > step:
                                raise err(f"request {rid!r} is listed before its arrival step {arrival}")
                    last_step = step
                    _keep_ahead(ahead, step)
                    self.steps += 1
                    yield Step(n, StepRecord(step, waiting, running, sched_raw, admitted,
                                             preempted, finished, obj.get("throttle", False)))
                elif kind == "header":
                    raise err("a second header line")
                else:
                    raise err(f"unknown event kind {kind!r} (expected arrive, abort or step)")
        except OSError as exc:
            raise TraceError(self.file, self._seen, f"cannot read: {exc}") from None
        except UnicodeDecodeError as exc:
            raise TraceError(self.file, self._seen + 1, f"not UTF-8 text: {exc.reason}") from None
        except EOFError as exc:  # a gzip stream cut short
            if not self.allow_truncated_tail or self.file != self._files[-1]:
                raise TraceError(self.file, self._seen + 1, f"gzip stream cut short: {exc}") from None
            self.complete = False

    def trace(self) -> Trace:
        """Read every event into a `Trace` (memory grows with the trace)."""
        trace = Trace(self.path, self.config, self.source, self.header)
        trace.events.extend(self)
        trace.complete = self.complete
        return trace



def _well_formed_arrival(obj: dict[str, Any], known: dict[str, int], last_step: int | None) -> Request | None:
    """The arrival line's request when it passes every check of
    `TraceReader.__iter__`, else None (the line-by-line checks then say why)."""
    get = obj.get
    step, rid, adapter, prompt, output, priority = (
        get("step"), get("id"), get("adapter"), get("prompt_tokens"), get("max_tokens"), get("priority", 0))
    if (type(step) is int and step >= 0 and (last_step is None or step > last_step) and type(rid) is str and rid
            and rid not in known and type(adapter) is int and adapter >= 0 and type(prompt) is int and prompt >= 1
            and type(output) is int and output >= 1 and type(priority) is int):
        return Request(rid, adapter, prompt, output, step, priority)
    return None


def _typed_arrival(line: Any, known: dict[str, int], last_step: int | None) -> Request | None:
    """`_well_formed_arrival` for a typed line (`_typed`: types and the step's bound checked)."""
    step, rid = line.step, line.id
    if (last_step is None or step > last_step) and rid and rid not in known and line.adapter >= 0 \
            and line.prompt_tokens >= 1 and line.max_tokens >= 1:
        return Request(rid, line.adapter, line.prompt_tokens, line.max_tokens, step, line.priority)
    return None


def _typed_step(line: Any, known: dict[str, int], ahead: dict[str, int], last_step: int | None) -> StepRecord | None:
    """`_well_formed_step` for a typed line (`_typed`: types and bounds checked)."""
    step = line.step
    if last_step is not None and step <= last_step:
        return None
    lists = (line.waiting, line.running, line.admitted, line.preempted, line.finished)
    if not _refs_ok(lists, line.scheduled, known, ahead, step):
        return None
    return StepRecord(step, *lists[:2], line.scheduled, *lists[2:], line.throttle)


def _refs_ok(lists: tuple[list[str], ...], sched: dict[str, int], known: dict[str, int], ahead: dict[str, int],
             step: int) -> bool:
    """Each list of string ids names no request twice, and every id of the
    lists and of `sched` arrived by `step`; then prunes `ahead` (`_keep_ahead`)."""
    kk = known.keys()
    for ids in lists:
        if ids:
            if len(ids) == 1:
                if ids[0] not in known:
                    return False
            else:
                u = set(ids)
                if len(u) != len(ids) or not kk >= u:
                    return False
    if sched and not kk >= sched.keys():
        return False
    if ahead:
        late = {r for r, a in ahead.items() if a > step}
        if late and (not late.isdisjoint(sched) or any(not late.isdisjoint(ids) for ids in lists)):
            return False
        _keep_ahead(ahead, step)
    return True


def _keep_ahead(ahead: dict[str, int], step: int) -> None:
    """Once step `step`'s line is read, keep in `ahead` only the arrivals after it."""
    for rid in [r for r, a in ahead.items() if a <= step]:
        del ahead[rid]


def _well_formed_step(obj: dict[str, Any], known: dict[str, int], ahead: dict[str, int],
                      last_step: int | None) -> StepRecord | None:
    """The step line's record when it passes every check of `TraceReader.__iter__`
    (checked in bulk), else None: the line-by-line checks then name the first
    failure. `ahead`: the requests arrived after the last step line (only those
    can have arrived after this step); pruned here when the line is good."""
    step = obj.get("step")
    if type(step) is not int or step < 0 or (last_step is not None and step <= last_step):
        return None
    get = obj.get
    waiting, running, admitted, preempted, finished, sched = (
        get("waiting"), get("running"), get("admitted"), get("preempted"), get("finished"), get("scheduled"))
    if not (type(waiting) is list and type(running) is list and type(admitted) is list
            and type(preempted) is list and type(finished) is list and type(sched) is dict):
        return None
    throttle = get("throttle", False)
    if type(throttle) is not bool:
        return None
    if sched:
        vals = sched.values()
        if set(map(type, vals)) != _INT or min(vals) < 1:
            return None
    lists = (waiting, running, admitted, preempted, finished)
    try:  # an id that is not a string is not a key of `known` (or is unhashable)
        if not _refs_ok(lists, sched, known, ahead, step):
            return None
    except TypeError:
        return None
    return StepRecord(step, waiting, running, sched, admitted, preempted, finished, throttle)


def step_line_at(path: str, step: int) -> int | None:
    """The line of the first step line at or after `step` in a trace file or
    directory (in its segment; a second, light pass)."""
    for f in segments(path):
        for n, raw in iter_lines(f):
            if '"step"' not in raw:
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError:
                return None
            if isinstance(obj, dict) and obj.get("kind") == "step" and isinstance(obj.get("step"), int) \
                    and obj["step"] >= step:
                return n
    return None


def read_trace(path: str | os.PathLike[str], *, allow_truncated_tail: bool = False) -> Trace:
    """Read a trace, checking its structure and references only: what it rejects
    (`TraceError`) and what it leaves to the properties, docs/operator-scale.md.
    Lines are read in order (`TraceReader`): the first malformed one is reported.
    `allow_truncated_tail`: an unparsable *final* line (a crash can cut it short)
    is dropped and `Trace.complete` is False."""
    return TraceReader(path, allow_truncated_tail=allow_truncated_tail).trace()
