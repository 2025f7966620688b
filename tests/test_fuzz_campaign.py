"""A short fuzz campaign on a local two-node Ray cluster, checked through its report.

The campaign replays every trace through the `blocking` reference
(`replay_against`): a planted bug that vLLM's `vllm` policy diverges from
within the first seeds, so the test can see a finding found on the cluster,
shrunk, written as a reproducer that reproduces, and not shrunk again when
the campaign resumes.
"""

from __future__ import annotations

import importlib.util
import json
import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before Ray is imported, as fuzz/__init__.py does

import pytest  # noqa: E402
from lora_sched.fuzz.campaign import Options, run_campaign  # noqa: E402
from lora_sched.fuzz.runner import run_case  # noqa: E402
from lora_sched.fuzz.space import FuzzCase  # noqa: E402

pytestmark = pytest.mark.vllm  # and the fuzz extra (ray)

COUNT = 16  # seed 14 runs `vllm` and diverges from the planted reference


@pytest.fixture(scope="module")
def cluster():
    import ray  # the fuzz extra: imported here so `pytest -m "not vllm"` collects without it
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1",
                                                      "include_dashboard": False})
    c.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.mark.full  # a two-node Ray cluster: minutes on 2 cores (make test-full)
def test_campaign_on_two_nodes(cluster, tmp_path) -> None:
    opts = Options(count=COUNT, workers=2, chunk=4, address=cluster.address, replay_against="blocking",
                   shrink_runs=300, progress_every=5.0)
    report = run_campaign(opts, tmp_path)
    d = json.loads((tmp_path / "report.json").read_text())
    assert d["format"] == "lora-sched-fuzz-report" and d["vllm"].startswith("vllm 0.")
    assert d["workloads"] == COUNT and d["ranges_done"] == [[0, COUNT]]
    run = d["runs"][-1]
    assert run["workers"] == 2 and len(run["nodes"]) == 2, run  # one worker on each node
    assert d["coverage"]["policy:vllm"] >= 1 and sum(v for k, v in d["coverage"].items()
                                                     if k.startswith("policy:")) == COUNT
    sigs = {f["signature"]: f for f in d["findings"]}
    assert "divergence:scheduled:vllm" in sigs, sorted(sigs)
    f = sigs["divergence:scheduled:vllm"]
    assert f["status"] == "shrunk" and f["minimal_size"]["requests"] <= 4, f
    for name in ("case", "trace", "itf", "test"):
        assert (tmp_path / f["files"][name]).is_file(), f["files"]
    itf = json.loads((tmp_path / f["files"]["itf"]).read_text())
    assert itf["#meta"]["format"] == "ITF" and len(itf["states"]) >= 2
    # The reproducer reproduces (run as pytest would: import, call the test).
    spec = importlib.util.spec_from_file_location("repro", tmp_path / f["files"]["test"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    next(getattr(mod, n) for n in dir(mod) if n.startswith("test_"))()
    # 1-minimal: without any one of its requests the minimal case no longer fails this way.
    small = FuzzCase.from_json(f["minimal"])
    for i in range(len(small.workload.requests)):
        reqs = small.workload.requests[:i] + small.workload.requests[i + 1:]
        assert f["signature"] not in run_case(small.with_workload(reqs)).signatures, i

    # Resume: the seeds done are skipped, known signatures are not shrunk again.
    again = run_campaign(Options(count=4, workers=2, chunk=4, address=cluster.address, replay_against="blocking"),
                         tmp_path)
    d2 = again.to_json()
    assert d2["ranges_done"] == [[0, COUNT + 4]] and d2["workloads"] == COUNT + 4
    before = {x.signature: x.shrink_runs for x in report.findings}
    assert all(x.shrink_runs == before[x.signature] for x in again.findings if x.signature in before)
