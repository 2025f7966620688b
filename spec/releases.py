"""The supported vLLM releases and their scheduling semantics: one registry.

Every part of the project that must know which vLLM it models asks here. The
fields, each with the vLLM lines it follows and its consumers:
docs/conformance.md, "The releases' differences".
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
    threshold_chunked_only: bool = False  # long_prefill_token_threshold ignored without chunked prefill

    @property
    def pattern(self) -> str:
        """The installed versions this release covers, as users write it (`0.32.x`)."""
        return f"{self.name}.x"


RELEASES: dict[str, Release] = {
    r.name: r for r in (
        Release("0.32", cap_counts="scheduled", prefill_cadence="dp_engine",
                priority_self_preempt="stop", zero_token_waiting="stop"),
        Release("0.33", cap_counts="running", prefill_cadence="scheduler",
                priority_self_preempt="skip", zero_token_waiting="skip"),
        Release("0.34", cap_counts="running", prefill_cadence="scheduler",
                priority_self_preempt="skip", zero_token_waiting="skip", threshold_chunked_only=True),
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


def prefill_threshold(release: Release, threshold: int, chunked_prefill: bool) -> int:
    """The `--long-prefill-token-threshold` the release applies (0: none)."""
    return 0 if release.threshold_chunked_only and not chunked_prefill else threshold


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


def unregistered(source: str) -> str | None:
    """The vLLM version a trace's `source` names when the registry lacks its
    release (`vllm 0.35.0` -> `0.35.0`), else None. Such a trace is judged
    with `NEWEST`'s semantics and has no reference to replay against."""
    m = _IN_SOURCE.search(source)
    if m is None:
        return None
    try:
        return None if release_name(m.group(1)) in RELEASES else m.group(1)
    except UnknownRelease:
        return None


def modelled(version: str) -> str:
    """The release whose semantics judge vLLM `version`: its own, or `NEWEST`
    for a version the registry lacks (a later release, a dev build)."""
    try:
        return get(version).name
    except UnknownRelease:
        return NEWEST


def from_source(source: str) -> str | None:
    """The release a trace header's `source` names (`vllm 0.33.0` -> `0.33`),
    None when it names no vLLM version; an unsupported one raises `UnknownRelease`."""
    m = _IN_SOURCE.search(source)
    if m is None:
        return None
    return get(m.group(1)).name
