"""Put on PYTHONPATH of the vLLM server that
`tests/test_conformance_live.py::test_readme_deploy_command` starts, so that
every Python process of it (API server, engine core, model worker) imports
this as `sitecustomize` and asks Linux for the AMX tile permission first.

Why: on an x86 CPU with AMX, vLLM 0.32's CPU attention runs AMX tile
instructions for bfloat16 models with KV blocks a multiple of 32 (the
README command's defaults: `cpu_attn._get_attn_isa` returns "amx"), but
vLLM never asks the kernel for the permission Linux requires before a
process uses AMX tiles (`arch_prctl(ARCH_REQ_XCOMP_PERM)`; torch's
`torch.cpu._init_amx()` asks for it; nothing in vLLM calls it). Without it
the model worker may die with SIGILL ("Fatal Python error: Illegal
instruction" in `cpu_attention_with_kv_cache`) on its first request. Here
on 2026-12-04 that happened to 6 of 17 servers started with this command
and to 3 of 10 started the same way with vLLM's stock scheduler (no
`--scheduler-cls`), and CI's run of stop 41 failed on it. With the
permission asked for first, none of 22 did (18 servers and 4 runs of the
test). So it is vLLM's CPU build on this host, not the scheduler: the
crash is in the model worker, a process the scheduler does not run in.
GPU deployments never reach this code.
"""

import torch

torch.cpu._init_amx()
