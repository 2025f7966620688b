"""The catalogue benchmark: how fast `lora-sched fuzz --scheduler-cls` finds each defect of `examples/`.

    python -m examples.benchmark examples/ [--minutes 2] [--workers 1] [--out DIR]

For each entry of `<dir>/manifest.json` it runs a campaign on the entry's
class with the entry's `--expect` flags, from the entry's seed: an entry with
defects until each expected one is found and shrunk (at most `--minutes`),
a clean entry for `--minutes` in full. It prints one row per finding (when it
was found and shrunk, after the workers were ready, the shrunk size and the
shrinker's runs) and per clean entry the workloads run, then whether the
manifest holds both ways: every expected defect found, nothing else found.
One Ray session serves every entry (the workers import vLLM once).

`Entry`, `judge` and `run_entry` are what `tests/test_catalogue.py` runs
with the manifest's short campaigns.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lora_sched.conformance.target import load, normalise
from lora_sched.fuzz.campaign import Options, Report, run_campaign
from lora_sched.fuzz.growth import growth_findings

MANIFEST = "manifest.json"
FORMAT = "lora-sched-catalogue"


@dataclass(frozen=True)
class Entry:
    """One catalogue class: its path, flags and the findings (kind:name, alternatives per item) expected."""

    name: str
    cls: str
    expect: tuple[str, ...]
    findings: tuple[tuple[str, ...], ...]
    seed: int = 0
    count: int = 16

    @property
    def clean(self) -> bool:
        return not self.findings


def load_manifest(directory: str | Path) -> list[Entry]:
    """The entries of `<directory>/manifest.json`, class files resolved against the directory."""
    d = Path(directory)
    data = json.loads((d / MANIFEST).read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{d / MANIFEST}: not a {FORMAT} (format {data.get('format')!r})")
    out = []
    for e in data["entries"]:
        cls = str(e["class"])
        if ":" in cls:
            file, _, name = cls.rpartition(":")
            cls = f"{(d / file).resolve()}:{name}"
        items = tuple((x,) if isinstance(x, str) else tuple(x) for x in e.get("findings", []))
        out.append(Entry(e["name"], cls, tuple(e.get("expect", [])), items, int(e.get("seed", 0)),
                         int(e.get("count", 16))))
    return out


def _kind_name(signature: str) -> str:
    """`kind:name:Class` -> `kind:name` (the name may hold colons: `scheduler.py:schedule`)."""
    return signature.rsplit(":", 1)[0]


@dataclass
class Verdict:
    missing: list[tuple[str, ...]] = field(default_factory=list)  # expected items no finding matched
    unexpected: list[str] = field(default_factory=list)  # findings no item allows

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unexpected


def judge(entry: Entry, signatures: list[str]) -> Verdict:
    """The manifest both ways: each expected item found, each finding expected."""
    found = {_kind_name(s) for s in signatures}
    allowed = {alt for item in entry.findings for alt in item}
    return Verdict([item for item in entry.findings if not found & set(item)],
                   sorted(s for s in signatures if _kind_name(s) not in allowed))


@dataclass
class EntryResult:
    entry: Entry
    report: Report
    seconds: float
    growth_seconds: float | None

    @property
    def verdict(self) -> Verdict:
        return judge(self.entry, [f.signature for f in self.report.findings])


def run_entry(entry: Entry, out: Path, *, count: int | None = None, minutes: float | None = None,
              workers: int = 1, stop_when_found: bool = False, log=None) -> EntryResult:
    """A campaign on `entry` in `out` (fresh); with `--expect bounded_wait` the growth check after it."""
    target = load(normalise(entry.cls))
    t0 = time.perf_counter()

    campaign_items = [item for item in entry.findings if not any(a.startswith("growth:") for a in item)]
    until = None
    if stop_when_found and not entry.clean and campaign_items:
        ent = Entry(entry.name, entry.cls, entry.expect, tuple(campaign_items), entry.seed, entry.count)

        def until(report: Report) -> bool:
            sigs = [f.signature for f in report.findings if f.status != "found"]
            return not judge(ent, sigs).missing and all(f.status != "found" for f in report.findings)
    elif stop_when_found and not entry.clean:
        def until(report: Report) -> bool:  # growth findings only: the workloads cannot find them
            return report.workloads >= entry.count
    opts = Options(minutes=minutes, count=count if minutes is None else None, workers=workers, seed=entry.seed,
                   scheduler_cls=target.path, expect=tuple(sorted(entry.expect)), until=until,
                   progress_every=30.0)
    report = run_campaign(opts, out, log=log or (lambda s: None))
    growth_s = None
    if "bounded_wait" in entry.expect:
        g0 = time.perf_counter()
        report.growth = growth_findings(target, out, report.findings).to_json()
        growth_s = time.perf_counter() - g0
        report.save(out / "report.json")
    return EntryResult(entry, report, time.perf_counter() - t0, growth_s)


def rows(result: EntryResult) -> list[str]:
    """The table's rows for one entry."""
    e, r = result.entry, result.report
    if not r.findings.by_sig:
        return [f"{e.name:22} {'(clean) no finding':48} {r.workloads:>9} {'-':>8} {'-':>9} {'-':>8} {'-':>5}"]
    out = []
    for f in r.findings:
        if f.kind == "growth":
            found = shrunk = f"{result.growth_seconds:.1f}" if result.growth_seconds is not None else "?"
            size, runs = "family", "-"
        else:
            found = f"{f.found_after_s:.1f}" if f.found_after_s is not None else "?"
            shrunk = f"{f.shrunk_after_s:.1f}" if f.shrunk_after_s is not None else f.status
            size = f"{len(f.minimal['requests'])} req" if f.minimal else "-"
            runs = str(f.shrink_runs)
        out.append(f"{e.name:22} {_kind_name(f.signature)[:48]:48} {r.workloads:>9} {found:>8} {shrunk:>9} "
                   f"{size:>8} {runs:>5}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.benchmark", description=__doc__.splitlines()[0])
    p.add_argument("directory", help="a catalogue directory with manifest.json (examples/)")
    p.add_argument("--minutes", type=float, default=2.0,
                   help="per entry: the clean ones' campaign length, the others' limit (default 2)")
    p.add_argument("--workers", type=int, default=1, help="Ray workers (default 1)")
    p.add_argument("--out", default="out/catalogue", help="one campaign directory per entry under it")
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="run only this entry (repeatable)")
    args = p.parse_args(argv)
    try:
        entries = load_manifest(args.directory)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    entries = [e for e in entries if not args.only or e.name in args.only]
    out = Path(args.out)
    print(f"{'entry':22} {'finding':48} {'workloads':>9} {'found s':>8} {'shrunk s':>9} {'size':>8} {'runs':>5}")
    results: list[EntryResult] = []
    for e in entries:
        d = out / e.name
        if (d / "report.json").exists():
            (d / "report.json").unlink()
        res = run_entry(e, d, minutes=args.minutes, workers=args.workers, stop_when_found=True)
        results.append(res)
        print("\n".join(rows(res)), flush=True)
    bad = [r for r in results if not r.verdict.ok]
    for r in bad:
        v = r.verdict
        print(f"{r.entry.name}: manifest does not hold: missing {[list(m) for m in v.missing]}, "
              f"unexpected {v.unexpected}")
    summary: dict[str, Any] = {r.entry.name: {"ok": r.verdict.ok, "seconds": round(r.seconds, 1),
                                              "report": str(out / r.entry.name / "report.json")} for r in results}
    (out / "catalogue.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"times: seconds after the workers were ready; {len(results) - len(bad)}/{len(results)} entries "
          f"as the manifest says")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
