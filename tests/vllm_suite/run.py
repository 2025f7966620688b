"""vLLM's own scheduler tests, run on stock vLLM and with lora_sched's classes substituted.

    python tests/vllm_suite/run.py [--select scheduler|all] [--pairs fair,fair-async]

Takes the installed vLLM's release source distribution from the package index
(its `tests/`, sha256-checked, kept under `.vllm-tests/<version>/`), writes
the model configs those tests name into an offline Hugging Face cache there
(nothing is downloaded from a model hub: a test that needs more, the
multimodal ones needing torchvision, fails on stock too), then runs the
selected test files once per mode of `substitute.py`, each ours beside its
stock baseline:

- `fair`: `FairScheduler` / `AsyncFairScheduler` for vLLM's `Scheduler` /
  `AsyncScheduler`, beside stock vLLM;
- `fair-async`: `AsyncFairScheduler` for every scheduler, beside vLLM's
  `AsyncScheduler` for every scheduler.

Every test that passes on the baseline must pass with ours, unless
`known.json` lists it with the documented rule that changes its outcome.
Prints per mode the counts (passed on the baseline, passed with ours, tests
that built a substituted class) and exits 1 on any other difference, 2 when
the tests cannot be had.

`--select scheduler` (the default) runs the files that build a scheduler;
`all` adds the rest of `tests/v1/core` (which build none: the substitution
cannot change them, so they run once, on ours).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CACHE = ROOT / ".vllm-tests"
INDEX = os.environ.get("LORA_SCHED_PACKAGE_INDEX", "https://pypi.org/simple")

# The test files that build a scheduler (each calls `create_scheduler` or a
# scheduler class), and the rest of the directories the issue names.
SCHEDULER_FILES = [
    "tests/v1/core/test_scheduler.py",
    "tests/v1/core/test_async_scheduler.py",
    "tests/v1/core/test_deferred_block_free.py",
    "tests/v1/core/test_prefix_caching.py",
    "tests/v1/core/test_prefix_replay.py",
    "tests/v1/core/test_priority_preemption_bug.py",
    "tests/v1/core/test_priority_scheduler_random.py",
    "tests/v1/core/test_swa_inflight_window_free.py",
    "tests/v1/core/test_worker_slot_overflow.py",
    "tests/v1/streaming_input/test_scheduler_streaming.py",
]
ALL_DIRS = ["tests/v1/core"]

# Model configs the tests name (`create_scheduler`'s model): config.json only.
MODEL_CONFIGS: dict[str, dict] = {
    "facebook/opt-125m": {
        "architectures": ["OPTForCausalLM"], "model_type": "opt", "activation_function": "relu",
        "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1, "do_layer_norm_before": True,
        "ffn_dim": 3072, "hidden_size": 768, "max_position_embeddings": 2048, "num_attention_heads": 12,
        "num_hidden_layers": 12, "torch_dtype": "float16", "vocab_size": 50272, "word_embed_proj_dim": 768,
    },
    "facebook/opt-350m": {
        "architectures": ["OPTForCausalLM"], "model_type": "opt", "activation_function": "relu",
        "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1, "do_layer_norm_before": False,
        "ffn_dim": 4096, "hidden_size": 1024, "max_position_embeddings": 2048, "num_attention_heads": 16,
        "num_hidden_layers": 24, "torch_dtype": "float16", "vocab_size": 50272, "word_embed_proj_dim": 512,
    },
}
PAIRS = {"fair": "stock", "fair-async": "stock-async"}


class Unavailable(RuntimeError):
    """The release's tests cannot be had (no network to the index, no sdist)."""


def installed_vllm(python: str) -> str:
    out = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True,
                         env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    if out.returncode != 0:
        raise Unavailable(f"{python}: vLLM does not import: {out.stderr.strip().splitlines()[-1:]}")
    return out.stdout.strip().splitlines()[-1].split("+")[0]


def fetch_tests(version: str) -> Path:
    """`.vllm-tests/<version>/` holding the sdist's tests/ (downloaded once)."""
    dest = CACHE / version
    if (dest / "tests" / "v1" / "core").is_dir() and (dest / "pyproject.toml").is_file():
        return dest
    name = f"vllm-{version}.tar.gz"
    try:
        with urllib.request.urlopen(f"{INDEX}/vllm/", timeout=60) as page:
            html = page.read().decode()
    except OSError as exc:
        raise Unavailable(f"{INDEX}/vllm/: {exc}") from None
    m = re.search(rf'href="([^"]*{re.escape(name)})#sha256=([0-9a-f]{{64}})"', html)
    if m is None:
        raise Unavailable(f"{INDEX}/vllm/ lists no {name}")
    url, digest = m.group(1), m.group(2)
    if url.startswith("/"):
        url = re.sub(r"^(https?://[^/]+).*", r"\1", INDEX) + url
    CACHE.mkdir(exist_ok=True)
    archive = CACHE / name
    print(f"fetching {name} ...", flush=True)
    urllib.request.urlretrieve(url, archive)
    got = hashlib.sha256(archive.read_bytes()).hexdigest()
    if got != digest:
        archive.unlink()
        raise Unavailable(f"{name}: sha256 {got} != the index's {digest}")
    top = f"vllm-{version}/"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(top + "tests/") or m.name == top + "pyproject.toml"]
        for m in members:
            m.name = m.name[len(top):]
        tar.extractall(dest, members=members, filter="data")
    archive.unlink()
    return dest


def hf_cache() -> Path:
    """An offline Hugging Face cache holding `MODEL_CONFIGS`."""
    home = CACHE / "hf"
    for repo, cfg in MODEL_CONFIGS.items():
        base = home / "hub" / f"models--{repo.replace('/', '--')}"
        snap = base / "snapshots" / ("0" * 40)
        snap.mkdir(parents=True, exist_ok=True)
        (base / "refs").mkdir(exist_ok=True)
        (base / "refs" / "main").write_text("0" * 40)
        (snap / "config.json").write_text(json.dumps(cfg))
    return home


def run_mode(python: str, tests: Path, files: list[str], mode: str, out: Path) -> dict[str, str]:
    """Run `files` under `mode`; each test id -> passed | failed | skipped."""
    xml, log = out / f"{mode}.xml", out / f"{mode}-built.json"
    env = {**os.environ, "LORA_SCHED_SUBSTITUTE": mode, "LORA_SCHED_SUBSTITUTE_LOG": str(log),
           "HF_HOME": str(hf_cache()), "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR",
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    # vLLM's own pytest settings (its pyproject.toml), rooted at its checkout: not this repository's.
    cmd = [python, "-m", "pytest", "-c", "pyproject.toml", "--rootdir", ".", "--noconftest", "-q",
           "-p", "no:cacheprovider", "-p", "substitute", "-o", "faulthandler_timeout=300", f"--junitxml={xml}",
           *files]
    subprocess.run(cmd, cwd=tests, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not xml.exists():
        raise Unavailable(f"{mode}: pytest wrote no report ({xml})")
    outcomes: dict[str, str] = {}
    for case in ET.parse(xml).iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        tags = {child.tag for child in case}
        outcomes[test_id] = ("failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags
                             else "passed")
    return outcomes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=sys.executable, help="the interpreter whose vLLM runs the tests")
    p.add_argument("--select", choices=["scheduler", "all"], default="scheduler")
    p.add_argument("--pairs", default="fair,fair-async", help="modes to run beside their stock baseline")
    p.add_argument("--out", default=str(CACHE / "results"))
    args = p.parse_args(argv)
    args.python = os.path.abspath(args.python)  # the runs start in the tests' directory
    try:
        version = installed_vllm(args.python)
        tests = fetch_tests(version)
    except Unavailable as exc:
        print(f"error: vLLM's tests cannot be had: {exc}", file=sys.stderr)
        return 2
    known: dict[str, str] = json.loads((HERE / "known.json").read_text())
    out = Path(args.out) / version
    out.mkdir(parents=True, exist_ok=True)
    files = list(SCHEDULER_FILES)
    print(f"vLLM {version}: {len(files)} scheduler test files" + (" + the rest of tests/v1/core" if args.select == "all"
                                                                  else ""))
    bad = 0
    for mode in [m.strip() for m in args.pairs.split(",") if m.strip()]:
        if mode not in PAIRS:
            print(f"error: --pairs: unknown mode {mode!r}; known: {', '.join(PAIRS)}", file=sys.stderr)
            return 2
        base = run_mode(args.python, tests, files, PAIRS[mode], out)
        ours = run_mode(args.python, tests, files, mode, out)
        built = json.loads((out / f"{mode}-built.json").read_text())["tests_building"]
        lost = sorted(t for t, o in base.items() if o == "passed" and ours.get(t) != "passed")
        unexplained = [t for t in lost if t not in known]
        gained = sorted(t for t, o in ours.items() if o == "passed" and base.get(t) != "passed")
        print(f"  {mode}: {sum(o == 'passed' for o in base.values())}/{len(base)} pass on {PAIRS[mode]}, "
              f"{sum(o == 'passed' for o in ours.values())}/{len(ours)} with ours; built "
              + ", ".join(f"{name} in {n} tests" for name, n in sorted(built.items())))
        for t in lost:
            print(f"    {'LOST' if t in unexplained else 'known'}: {t}" + (f" ({known[t]})" if t in known else ""))
        for t in gained:
            print(f"    passes only with ours: {t}")
        bad += len(unexplained)
        if not any(o == "passed" for o in base.values()) or not any(n.endswith("FairScheduler") for n in built):
            print(f"    FAILED: nothing ran ({PAIRS[mode]} passed none, or no test built lora_sched's class)")
            bad += 1
    if args.select == "all":
        rest = sorted(str(f.relative_to(tests)) for d in ALL_DIRS for f in (tests / d).rglob("test_*.py")
                      if str(f.relative_to(tests)) not in files)
        outcomes = run_mode(args.python, tests, rest, "fair", out)
        print(f"  rest of tests/v1/core with ours: {sum(o == 'passed' for o in outcomes.values())}/{len(outcomes)} "
              f"pass (they build no scheduler)")
    print("ok: every test that passes on stock passes with ours" if not bad else
          f"FAILED: {bad} test(s) pass on stock and fail with ours")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
