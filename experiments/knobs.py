"""`python -m experiments.cli --knob-goals`: issue 20's goals at each value of S, fair's one knob.

An operator choosing `starvation_steps` wants to know which goals hold at
each value, on workloads the value was not chosen on. For each S of the
sweep, side by side in one run:

- **adversarial, saved families**: fair at S on every family of
  `experiments/families` against the goal (throughput >= 0.8 of vllm's in
  cost-model seconds, worst wait <= 1.25x vllm's + S), design and held-out
  sets as `bench --adversarial --goals` splits them
  (`adversarial.goal_rows(knob=S)`). Those families were found against
  fair at S = 16, so for S = 16 they are the rule's own design data;
  for any other S they are fixed workloads.
- **adversarial, fresh searches**: hill climbs against fair *at S itself*
  (`adversarial.search(knob=S)`: every space, the throughput and the wait
  objective, each seed), judged by the same goal. The same seed starts
  from the same instances at every S, so each S is attacked alike and
  none of these workloads was seen before the sweep: this is the held-out
  test of a knob value. The families are not saved under
  `experiments/families`; their figures go in the JSON.
- **realistic**: the default grid (`bench.realistic.grid`), vllm, fair at
  each S and the field at its default knob, and the grid's goals at each S
  (`goals(point=("fair", S))`), design and held-out sets
  (`realistic_sweep`). `bench --realistic --knob-goals` runs this part
  alone, on the grid `--large` / `--draw` name (`realistic_report`).

Nothing asserts on these figures; they are printed, written to
`knob-goals.json` under `--out` and plotted (`knob-goals.png`).
"""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

from lora_sched.bench import realistic

from experiments.adversarial import GOAL_RATIO, GOAL_WAIT, SPACES, goal_rows, search
from experiments.families import FAMILY_DIR, load
from experiments.frontier import DEFAULT_KNOB, points
from experiments.goals import goals

KNOBS = (8, 16, 24, 32, 48)
SEEDS = (1, 2, 3)
OBJECTIVES = ("throughput", "wait")


def goal_met(ratio: float, wait: int, vllm_wait: int, knob: int) -> tuple[bool, bool]:
    """Issue 20's adversarial goal at S = `knob`: (ratio half, wait half)."""
    return ratio >= GOAL_RATIO, wait <= GOAL_WAIT * vllm_wait + knob


def fresh(knob: int, seed: int, *, iters: int = 250, restarts: int = 2,
          spaces: tuple[str, ...] = SPACES, objectives: tuple[str, ...] = OBJECTIVES) -> list[dict]:
    """Hill climbs against fair at S = `knob` (one seed, every space and
    objective), each found workload judged by the goal at that S."""
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory(prefix=f"knob{knob}-") as tmp:
        d = Path(tmp)
        for space in spaces:
            search(("fair",), iters=iters, restarts=restarts, seed=seed, out_dir=d, objectives=objectives,
                   space=space, found_against=f"fair S{knob}", knob=knob)
        for path in sorted(d.glob("*.json")):
            name, cfg, reqs, _ = load(path)
            if cfg.starvation_steps != knob:
                raise AssertionError(f"{name}: searched at S = {knob} but saved with {cfg.starvation_steps}")
            pts = {p["policy"]: p for p in points(cfg, reqs, policies=("vllm", "fair"), knobs=(knob,))}
            f, v = pts["fair"], pts["vllm"]
            ratio_ok, wait_ok = goal_met(f["ratio"], f["wait"], v["wait"], knob)
            rows.append({"knob": knob, "seed": seed, "family": name, "ratio": f["ratio"],
                         "ratio_steps": f["ratio_steps"], "wait": f["wait"], "vllm_wait": v["wait"],
                         "ok": ratio_ok and wait_ok, "ratio_ok": ratio_ok, "wait_ok": wait_ok,
                         "requests": len(reqs)})
    return rows


def _fresh_job(args: tuple[int, int, int, int, tuple[str, ...]]) -> list[dict]:
    knob, seed, iters, restarts, spaces = args
    return fresh(knob, seed, iters=iters, restarts=restarts, spaces=spaces)


def _saved_job(args: tuple[int, Path]) -> list[dict]:
    knob, directory = args
    return goal_rows(directory, knob=knob)


def summary(rows: list[dict]) -> dict:
    """ok / of, the misses and the lowest ratio of a set of judged rows."""
    return {"ok": sum(r["ok"] for r in rows), "of": len(rows),
            "min_ratio": min((r["ratio"] for r in rows), default=float("nan")),
            "misses": [f"{r['family']}{'' if 'seed' not in r else ' seed ' + str(r['seed'])} "
                       f"{r['ratio']:.3f}/{r['wait']} (vllm {r['vllm_wait']})" for r in rows if not r["ok"]]}


def sweep(knobs: tuple[int, ...] = KNOBS, seeds: tuple[int, ...] = SEEDS, *, iters: int = 250, restarts: int = 2,
          directory: Path = FAMILY_DIR, specs: list | None = None, spaces: tuple[str, ...] = SPACES,
          processes: int = 2, progress: object = print) -> dict:
    """Every part of the module docstring, for each S in `knobs`."""
    doc: dict = {"knobs": list(knobs), "seeds": list(seeds), "iters": iters, "restarts": restarts,
                 "goal": {"ratio": GOAL_RATIO, "wait": f"{GOAL_WAIT}x vllm's + S"}, "by_knob": {}}
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(processes) as pool:
        progress(f"knob goals: saved families at S in {list(knobs)} ...")
        saved = dict(zip(knobs, pool.map(_saved_job, [(k, directory) for k in knobs]), strict=True))
        progress(f"knob goals: fresh searches against fair at each S (seeds {list(seeds)}, "
                 f"{iters} iters x {restarts} restarts, {len(spaces)} spaces x {len(OBJECTIVES)} objectives) ...")
        found: dict[int, list[dict]] = {k: [] for k in knobs}
        jobs = [(k, s, iters, restarts, spaces) for k in knobs for s in seeds]
        for i, rows in enumerate(pool.imap_unordered(_fresh_job, jobs), 1):
            if rows:
                found[rows[0]["knob"]].extend(rows)
            progress(f"  [{i}/{len(jobs)}] fresh searches done")
    real = realistic_sweep(realistic.grid() if specs is None else specs, knobs, processes=processes,
                           progress=progress)
    for k in knobs:
        entry: dict = real["by_knob"][str(k)]
        for name, design in (("design", True), ("held_out", False)):
            entry[f"saved_{name}"] = summary([r for r in saved[k] if r["design"] is design])
        entry["fresh"] = summary(found[k])
        entry["fresh_rows"] = found[k]
        doc["by_knob"][str(k)] = entry
    doc["realistic_vllm_tail_head"] = real["realistic_vllm_tail_head"]
    return doc


def realistic_sweep(specs: list, knobs: tuple[int, ...], *, processes: int = 2, progress: object = print,
                    keep_rows: bool = False) -> dict:
    """The realistic part of the sweep: vllm, fair at each S in `knobs` and
    the field at its default knob on `specs`, and per S the grid's goals
    on each set the specs hold (a fresh draw has no design set, so only
    `realistic_held_out`), fair's tail/head per workload and vllm's. With
    `keep_rows`, the rows themselves too (`rows`)."""
    pts = (("vllm", None), *(("fair", k) for k in knobs),
           *((p, DEFAULT_KNOB) for p in ("drainer", "timeslice")), ("vtc", None))
    progress(f"knob goals: realistic grid, {len(specs)} workloads x {len(pts)} points ...")
    real = realistic.run_grid(specs, pts, processes=processes, progress=lambda m: None)
    sets = [(name, design) for name, design in (("design", True), ("held_out", False))
            if any(s.design is design for s in specs)]
    doc: dict = {"by_knob": {}}
    for k in knobs:
        entry: dict = {f"realistic_{name}": [{"goal": g, "met": m, "figures": f} for g, m, f
                                             in goals(real, design=design, point=("fair", k))]
                       for name, design in sets}
        entry["realistic_tail_head"] = {r["workload"]: r["tail_head"] for r in real if r["point"] == f"fair S={k}"}
        doc["by_knob"][str(k)] = entry
    doc["realistic_vllm_tail_head"] = {r["workload"]: r["tail_head"] for r in real if r["policy"] == "vllm"}
    if keep_rows:
        doc["rows"] = real
    return doc


def print_sweep(doc: dict) -> None:
    """One line per S, then each S's misses and unmet realistic goals."""
    print("== issue 20's goals at each S (fair's one knob); adversarial goal: ratio >= "
          f"{GOAL_RATIO} of vllm, worst wait <= {GOAL_WAIT}x vllm's + S ==")
    print(f"{'S':>4}  {'saved design':>12}  {'saved held out':>14}  {'fresh (min ratio)':>20}  "
          f"{'realistic design':>16}  {'realistic held out':>18}")
    for k in doc["knobs"]:
        e = doc["by_knob"][str(k)]
        cnt = {key: f"{e[key]['ok']}/{e[key]['of']}" for key in ("saved_design", "saved_held_out", "fresh")}
        met = {key: f"{sum(g['met'] for g in e[key])}/{len(e[key])} met" if key in e else "no workloads"
               for key in ("realistic_design", "realistic_held_out")}
        fresh_cell = f"{cnt['fresh']} ({e['fresh']['min_ratio']:.3f})"
        print(f"{k:>4}  {cnt['saved_design']:>12}  {cnt['saved_held_out']:>14}  {fresh_cell:>20}  "
              f"{met['realistic_design']:>16}  {met['realistic_held_out']:>18}")
    for k in doc["knobs"]:
        e = doc["by_knob"][str(k)]
        print(f"\nS = {k}:")
        for key, title in (("saved_design", "saved, design"), ("saved_held_out", "saved, held out"),
                           ("fresh", "fresh searches")):
            if e[key]["misses"]:
                print(f"  {title} misses: " + "; ".join(e[key]["misses"]))
        for key, title in (("realistic_design", "realistic design"), ("realistic_held_out", "realistic held out")):
            for g in e.get(key, []):
                if not g["met"]:
                    print(f"  {title}: {g['goal']} ... NOT MET ({g['figures']})")


def realistic_report(out: Path, knobs: tuple[int, ...] = KNOBS, *, large: bool = False,
                     draw: int = realistic.GRID_DRAW, plots: bool = True, processes: int = 2) -> int:
    """`python -m experiments.cli --realistic --knob-goals S,S,...`: only the
    realistic part of the sweep, on the grid `--large` and `--draw` name
    (`realistic.grid(large=, draw=)`); prints each S's goals per set,
    writes `knob-realistic{-large}{-dDRAW}.json` under `out` (the rows
    too) and a plot of fair's tail/head against S."""
    specs = realistic.grid(large=large, draw=draw)
    name = "knob-realistic" + ("-large" if large else "") + realistic.draw_suffix(draw)
    t0 = time.perf_counter()
    doc: dict = {"knobs": list(knobs), "large": large, "draw": draw,
                 "specs": [realistic.spec_dict(s) for s in specs]}
    doc.update(realistic_sweep(specs, knobs, processes=processes, progress=lambda m: print(m, flush=True),
                               keep_rows=True))
    doc["wall_s"] = time.perf_counter() - t0
    print(f"== issue 20's realistic goals at each S: {len(specs)} workloads, draw {draw} ==")
    for k in knobs:
        e = doc["by_knob"][str(k)]
        for key in (key for key in e if key.startswith("realistic_") and key != "realistic_tail_head"):
            for g in e[key]:
                print(f"  S = {k:>3}, {key.removeprefix('realistic_').replace('_', ' ')}: {g['goal']} ... "
                      f"{'met' if g['met'] else 'NOT MET'}. ({g['figures']})")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\nwrote {path} ({doc['wall_s']:.0f} s)")
    if plots:
        from experiments.plots import knob_tail_head

        print(f"wrote {knob_tail_head(doc, out / f'{name}.png')}")
    return 0


def report(out: Path, knobs: tuple[int, ...] = KNOBS, seeds: tuple[int, ...] = SEEDS, *, iters: int = 250,
           restarts: int = 2, plots: bool = True) -> int:
    """`python -m experiments.cli --knob-goals`: run the sweep, print it, write
    knob-goals.json (and knob-goals.png) under `out`."""
    t0 = time.perf_counter()
    doc = sweep(knobs, seeds, iters=iters, restarts=restarts, progress=lambda m: print(m, flush=True))
    doc["wall_s"] = time.perf_counter() - t0
    print_sweep(doc)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "knob-goals.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\nwrote {path} ({doc['wall_s']:.0f} s)")
    if plots:
        from experiments.plots import knob_goals

        print(f"wrote {knob_goals(doc, out / 'knob-goals.png')}")
    return 0


if __name__ == "__main__":
    from experiments.cli import run_mode

    raise SystemExit(run_mode("--knob-goals"))
