"""`lora-sched fuzz`: a campaign of vLLM's real scheduler against the spec, on Ray.

- `fuzz.space`: the workload space; `generate(seed)` is a pure function of the seed;
- `fuzz.runner`: run one case in-process on vLLM, check it, name its failures;
- `fuzz.shrink`: delta debugging of a failing case down to a minimal one;
- `fuzz.findings`: signatures, deduplication, reproducers (pytest + ITF + trace);
- `fuzz.campaign`: Ray workers over seed ranges, progress, the resumable report;
- `fuzz.sweep`: the Z3 check catalogue as Ray tasks (`lora-sched prove --sweep`).
"""
