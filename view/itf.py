"""ITF counterexamples (`proofs.cex.Cex.to_itf`) read back as `lora-sched-trace` traces.

The ITF file holds the state *after* each step (index 0 the empty initial
state) and, in `#meta`, the configuration, requests and aborts. Step k is
rebuilt from state k-1 (waiting, running), the arrivals and aborts of step
k, and state k (scheduled, admitted, finished), in the encoding's orders
(no preemption; `proofs.encoding`). The trace goes through `spec.trace.TraceWriter` and
`read_trace`, so an inconsistent ITF file is rejected as any trace is.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from lora_sched.spec.config import Config, ConfigError
from lora_sched.spec.request import Request, RequestError
from lora_sched.spec.state import StepRecord
from lora_sched.spec.trace import Trace, TraceError, TraceWriter, read_trace


class ItfError(ValueError):
    """A malformed ITF counterexample: `path: where: reason`."""

    def __init__(self, path: str, where: str, reason: str) -> None:
        super().__init__(f"{path}: {where}: {reason}")


def is_itf(obj: Any) -> bool:
    return isinstance(obj, dict) and "states" in obj and "#meta" in obj


def _plain(v: Any) -> Any:
    """ITF values to Python: `{"#map": [[k, v], ...]}` to dicts, `{"#bigint": s}` to ints."""
    if isinstance(v, dict) and "#map" in v:
        return {_plain(k): _plain(x) for k, x in v["#map"]}
    if isinstance(v, dict) and "#bigint" in v:
        return int(v["#bigint"])
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _ids(state: dict[str, Any], key: str, err) -> list[str]:
    v = state.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise err(key, f"must be a list of request ids, got {v!r}")
    return v


def read_itf(path: str | os.PathLike[str], obj: dict[str, Any] | None = None) -> Trace:
    """The counterexample in `path` as a `Trace` (source `lora-sched prove (ITF)`).

    `Trace.header` keeps the ITF `#meta` (policy, property, note, lasso)."""
    spath = str(path)
    if obj is None:
        try:
            with open(spath, encoding="utf-8") as f:
                obj = json.load(f)
        except OSError as exc:
            raise ItfError(spath, "file", f"cannot read: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise ItfError(spath, f"line {exc.lineno}", f"bad JSON: {exc.msg}") from None
    if not is_itf(obj):
        raise ItfError(spath, "top level", "expected an ITF object with '#meta' and 'states'")
    meta = obj["#meta"]
    if not isinstance(meta, dict):
        raise ItfError(spath, "#meta", "must be an object")
    try:
        config = Config.from_dict({**meta.get("config", {}), "policy": meta.get("policy", "vllm")},
                                  where="#meta.config")
    except ConfigError as exc:
        raise ItfError(spath, "#meta", str(exc)) from None
    raw_reqs = meta.get("requests")
    if not isinstance(raw_reqs, list):
        raise ItfError(spath, "#meta.requests", "must be a list")
    reqs: list[Request] = []
    for i, r in enumerate(raw_reqs):
        try:
            reqs.append(Request(r["id"], r["adapter"], r["prompt_tokens"], r["max_tokens"], r["arrival"]))
        except (KeyError, TypeError) as exc:
            raise ItfError(spath, f"#meta.requests[{i}]", f"missing field {exc}") from None
        except RequestError as exc:
            raise ItfError(spath, f"#meta.requests[{i}]", str(exc)) from None
    aborts = meta.get("aborts", {})
    if not isinstance(aborts, dict):
        raise ItfError(spath, "#meta.aborts", "must map request ids to steps")
    states = obj["states"]
    if not isinstance(states, list) or not states:
        raise ItfError(spath, "states", "must be a non-empty list")

    by_id = {r.id: r for r in reqs}
    slot = {r.id: i for i, r in enumerate(reqs)}
    admitted_at: dict[str, tuple[int, int]] = {}
    lines: dict[int, str] = {}  # trace line -> ITF location, to name errors
    with tempfile.TemporaryDirectory() as d:
        tmp = os.path.join(d, "itf.jsonl")
        with TraceWriter(tmp, config, "lora-sched prove (ITF)") as w:
            n = 1
            prev = _plain(states[0])
            for k, raw in enumerate(states[1:], 1):
                where = f"states[{k}]"

                def err(key: str, reason: str, where: str = where) -> ItfError:
                    return ItfError(spath, f"{where}.{key}", reason)

                if not isinstance(raw, dict):
                    raise ItfError(spath, where, "must be an object")
                st = _plain(raw)
                step = st.get("step", k)
                if isinstance(step, bool) or not isinstance(step, int):
                    raise err("step", f"must be an integer, got {step!r}")
                for r in reqs:
                    if r.arrival == step:
                        n += 1
                        lines[n] = f"#meta.requests ({r.id})"
                        w.arrive(r, step)
                gone = {rid for rid, s in aborts.items() if s == step}
                for rid in sorted(gone, key=lambda x: slot.get(x, -1)):
                    n += 1
                    lines[n] = f"#meta.aborts ({rid})"
                    w.abort(rid, step)
                sched = st.get("scheduled", {})
                if not isinstance(sched, dict):
                    raise err("scheduled", f"must map request ids to tokens, got {sched!r}")
                admitted = _ids(st, "admitted", err)
                for rid in admitted:
                    admitted_at[rid] = (step, slot.get(rid, 0))
                new_arrivals = [r.id for r in reqs if r.arrival == step]
                waiting = [r for r in [*_ids(prev, "waiting", err), *new_arrivals] if r not in gone]
                running = sorted((r for r in _ids(prev, "running", err) if r not in gone),
                                 key=lambda r: admitted_at.get(r, (0, 0)))
                finished = [r for r in _ids(st, "finished", err) if r not in set(_ids(prev, "finished", err))]
                prev = st
                if not waiting and not running and not sched:
                    continue  # idle step: `policy.driver.run` does not schedule it either
                n += 1
                lines[n] = where
                w.step(StepRecord(step, waiting, running, {r: int(t) for r, t in sched.items()},
                                  admitted, [], finished, st.get("throttle") is True))
        for rid in aborts:
            if rid not in by_id:
                raise ItfError(spath, "#meta.aborts", f"abort of unknown request {rid!r}")
        try:
            trace = read_trace(tmp)
        except TraceError as exc:
            raise ItfError(spath, lines.get(exc.line, "states"), exc.reason) from None
    trace.path, trace.header = spath, meta
    return trace
