"""A request of the model (DESIGN section 2, "Request")."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


class RequestError(ValueError):
    """An invalid request; the message names the request and the field."""


@dataclass(frozen=True)
class Request:
    id: str
    adapter: int  # 0 = base model, > 0 = LoRA id
    prompt_tokens: int
    max_tokens: int  # fixed output length (the workload ignores EOS)
    arrival: int  # step at which it joins `waiting`
    priority: int = 0  # smaller is served first under the priority queue

    def __post_init__(self) -> None:
        if (type(self.id) is str and self.id and type(self.adapter) is int and self.adapter >= 0
                and type(self.prompt_tokens) is int and self.prompt_tokens >= 1 and type(self.max_tokens) is int
                and self.max_tokens >= 1 and type(self.arrival) is int and self.arrival >= 0
                and type(self.priority) is int):
            return  # valid, told at once (the checks below name what is not)

        def bad(field: str, why: str) -> RequestError:
            return RequestError(f"request {self.id!r}: {field} {why}")

        if not isinstance(self.id, str) or not self.id:
            raise RequestError(f"request id must be a non-empty string, got {self.id!r}")
        for name, lo in (("adapter", 0), ("prompt_tokens", 1), ("max_tokens", 1), ("arrival", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise bad(name, f"must be an integer, got {v!r}")
            if v < lo:
                raise bad(name, f"must be >= {lo}, got {v}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise bad("priority", f"must be an integer, got {self.priority!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
