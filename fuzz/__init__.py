"""`lora-sched fuzz`: a campaign of vLLM's real scheduler against the spec, on Ray.

- `fuzz.space`: the workload space; `generate(seed)` is a pure function of the seed;
- `fuzz.runner`: run one case in-process on vLLM, check it, name its failures;
- `fuzz.shrink`: delta debugging of a failing case down to a minimal one;
- `fuzz.findings`: signatures, deduplication, reproducers (pytest + ITF + trace);
- `fuzz.campaign`: Ray workers over seed ranges, progress, the resumable report.
"""

import os

# Ray on loopback (127.0.0.1 as the node address), read when `ray` is first
# imported, hence before any module here imports it. Export it as 1 to join a
# cluster whose other nodes must reach this driver.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
