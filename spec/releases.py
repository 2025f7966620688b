"""The supported vLLM releases and their scheduling semantics: one registry.

Every part of the project that must know which vLLM it models asks here. The
differences (0.32 / 0.33; lines of 0.33.0's `vllm/v1/core/sched/scheduler.py`):
`cap_counts`, the running requests the LoRA cap counts (scheduled ones /
every one in `self.running`, 1038-1047); `prefill_cadence`, who applies
`--prefill-schedule-interval` (the DP engine core, `DPEngineCoreProc` in
`vllm/v1/engine/core.py` / the scheduler, 396-425, 771-791, 1621-1629);
`priority_self_preempt` (`break` / `continue`, 982-992); `zero_token_waiting`
(`break` / skip, 1394-1398; unreachable in the model). Each in full, with its
consumers: docs/conformance.md, "The releases' differences".
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class UnknownRelease(ValueError):
    """A vLLM release the registry does not list; the message names the supported ones."""


@dataclass(frozen=True)
class Release:
    name: str  # "0.32": the release line, any patch version
    cap_counts: str  # "scheduled" | "running"
    prefill_cadence: str  # "dp_engine" | "scheduler"
    priority_self_preempt: str  # "stop" | "skip"
    zero_token_waiting: str  # "stop" | "skip"

    @property
    def pattern(self) -> str:
        """The installed versions this release covers, as users write it (`0.32.x`)."""
        return f"{self.name}.x"

    def covers(self, version: str) -> bool:
        """Is the vLLM `version` string (`0.33.0`, `0.33.1+cpu`) of this release?"""
        return release_name(version) == self.name


RELEASES: dict[str, Release] = {
    r.name: r for r in (
        Release("0.32", cap_counts="scheduled", prefill_cadence="dp_engine",
                priority_self_preempt="stop", zero_token_waiting="stop"),
        Release("0.33", cap_counts="running", prefill_cadence="scheduler",
                priority_self_preempt="skip", zero_token_waiting="skip"),
    )
}
NEWEST = max(RELEASES, key=lambda n: tuple(int(x) for x in n.split(".")))
# Traces written before the registry (and reference traces whose source names
# no vLLM) model the only release the project knew then.
LEGACY = "0.32"
SUPPORTED = ", ".join(r.pattern for r in RELEASES.values())

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.[0-9A-Za-z.+-]*)?$")
_IN_SOURCE = re.compile(r"\bvllm[ -]v?(\d+\.\d+(?:\.[0-9A-Za-z.+-]*)?)", re.IGNORECASE)


def release_name(version: str) -> str:
    """`0.33.0` -> `0.33`; the release line of a version string (not checked against the registry)."""
    m = _VERSION.match(version.strip())
    if m is None:
        raise UnknownRelease(f"vLLM version {version!r} is not a version number (supported: {SUPPORTED})")
    return f"{int(m.group(1))}.{int(m.group(2))}"


_GOT: dict[str, Release] = {}  # `get`'s answers so far (the checker asks at every step)


def get(name: str) -> Release:
    """The release `name` (`0.33`, or a full version such as `0.33.0`), or a clear error."""
    got = _GOT.get(name) if isinstance(name, str) else None
    if got is not None:
        return got
    if not isinstance(name, str):
        raise UnknownRelease(f"vLLM release must be a string such as {NEWEST!r}, got {name!r}")
    key = release_name(name)
    if key not in RELEASES:
        raise UnknownRelease(f"vLLM {name} is not a supported release (supported: {SUPPORTED})")
    _GOT[name] = RELEASES[key]
    return RELEASES[key]


def from_source(source: str) -> str | None:
    """The release a trace header's `source` names (`vllm 0.33.0` -> `0.33`),
    None when it names no vLLM version; an unsupported one raises `UnknownRelease`."""
    m = _IN_SOURCE.search(source)
    if m is None:
        return None
    return get(m.group(1)).name
