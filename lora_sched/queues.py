"""The waiting queue as the deploy classes hand it to vLLM's scan, for one scan.

`ScanOrderQueue` yields the requests a gate pins first (its scan order, or
fair's r* in a priority heap) and puts back what the scan skipped in the
order the queue had. `PassOverQueue` passes over the requests vLLM's scan
would only skip once the cap is full or fair holds their adapter, so the
scan visits the requests that can run, not the whole backlog. Neither
writes a request field; both leave vLLM's queue as its own skips would.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import suppress
from itertools import chain, compress, count, islice
from operator import is_
from typing import Any

from vllm.v1.core.sched.request_queue import PriorityRequestQueue, RequestQueue
from vllm.v1.request import Request, RequestStatus

PLAIN = (RequestStatus.WAITING, RequestStatus.PREEMPTED)
_STRETCH = 64  # `PassOverQueue._pass_over`: the least stretch walked before the places are found


def adapter_of(request: Request) -> int:
    lora = request.lora_request
    return lora.lora_int_id if lora is not None else 0


class ScanOrderQueue(RequestQueue):
    """vLLM's waiting queue, yielding pinned requests first, for one scan.

    `pin` sets the requests to visit first (a reference gate's `scan_order`,
    or fair's r* in a priority heap); everything else is delegated to the
    queue vLLM built. The requests vLLM puts back (`prepend_requests`) are
    restored to the order the queue had when the scan began: one pinned
    request in a FCFS deque in O(visited), otherwise by a re-sort."""

    def __init__(self, inner: RequestQueue) -> None:
        self.inner = inner
        self.front: list[Request] = []
        self._order: dict[str, int] | None = None
        self._pinned: Request | None = None  # the one pinned request of the O(visited) path
        self._place = 0  # its index in the FCFS queue when the scan began
        self._popped: list[Request] = []  # requests the scan took out, in visit order
        self._queued = False  # `pin(queued=True)`

    def pin(self, order: Iterable[Request], *, queued: bool = False) -> None:
        """Yield `order` first. `queued`: its requests are in the queue until
        the scan pops them (no membership test per peek)."""
        self.front = list(order)
        self._popped = []
        self._queued = queued
        if len(self.front) == 1 and isinstance(self.inner, deque):
            self._pinned, self._order = self.front[0], None
            self._place = self.inner.index(self._pinned) if self._pinned in self.inner else 0
        elif self.front and not isinstance(self.inner, PriorityRequestQueue):
            self._pinned, self._order = None, {r.request_id: i for i, r in enumerate(self.inner)}
        else:  # the heap puts back by its own key: no order to restore
            self._pinned, self._order = None, None

    def unpin(self) -> None:
        self.front, self._order, self._pinned, self._popped = [], None, None, []

    def _head(self) -> Request | None:
        while self.front and not self._queued and self.front[0] not in self.inner:
            self.front.pop(0)
        return self.front[0] if self.front else None

    def add_request(self, request: Request) -> None:
        self.inner.add_request(request)

    def pop_request(self) -> Request:
        head = self._head()
        if head is not None:
            self.front.pop(0)
            self.inner.remove_request(head)
            out = head
        else:
            out = self.inner.pop_request()
        if self._pinned is not None:
            self._popped.append(out)
        return out

    def peek_request(self) -> Request:
        head = self._head()
        return head if head is not None else self.inner.peek_request()

    def prepend_request(self, request: Request) -> None:
        self.inner.prepend_request(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        requests = list(requests)
        self.inner.prepend_requests(requests)
        star = self._pinned
        if star is not None and any(r is star for r in requests):
            back = {id(r) for r in requests}
            ahead = [r for r in self._popped if r is not star][:self._place]
            place = self._place - sum(1 for r in ahead if id(r) not in back)
            if place:
                inner: Any = self.inner
                inner.remove(star)
                inner.insert(place, star)
            return
        order = self._order
        if order is not None and not isinstance(self.inner, PriorityRequestQueue):
            rest = list(self.inner)
            self.inner.remove_requests(rest)
            rest.sort(key=lambda r: order.get(r.request_id, len(order)))
            for r in rest:
                self.inner.add_request(r)

    def remove_request(self, request: Request) -> None:
        self.inner.remove_request(request)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        self.inner.remove_requests(requests)

    def __bool__(self) -> bool:
        return bool(self.inner)

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[Request]:
        return iter(self.inner)


class PassOverQueue(RequestQueue):
    """What vLLM's loop asks before each visit: a run it would only skip is
        passed over first, and when the tally shows it would only skip the
        rest, the scan ends (False, once). Should that fail, the owner falls
        back to vLLM's rule (`_fault`) and the scan reads on from its place."""

    def __init__(self, inner: Any, owner: Any) -> None:
        self.inner = inner
        self.owner = owner
        self.fcfs = isinstance(inner, deque)
        # FCFS: the place of the next request the scan reads (all before it were
        # passed over or popped), the places vLLM's loop popped (in visit order),
        # and an iterator over the deque that yields the request at `_it_at` next
        self.at = 0
        self.popped: list[tuple[int, Request]] = []
        self._it: Iterator[Request] | None = None
        self._it_at = 0
        self.taken: list[Request] = []  # heap: out of the queue this scan, in visit order
        self.aside: set[Request] = set()  # heap: those passed over, not yet put back (hashed by identity)
        self.scanning = True
        # The tally that lets the scan end at once (`count`): None, or the
        # queue's requests not yet visited per adapter, ...
        self.left: dict[int, int] | None = None
        self.undeferred = 0  # ... how many of them are not in `deferred_waiting`,
        self.first_left: set[str] = set()  # ... and the requests put first not yet visited.
        self.tail: list[Request] = []  # arrived since the last scan (the driver's), for `_tail_first`
        self.prefix: int | None = None  # `_tail_first`: the prefix's length while the tail goes first
        self.tail_at = 0  # ... and the tail's place
        self._tail_stats: tuple[dict[int, int], int] | None = None  # per adapter, not deferred
        # `_jump`: the places where a run must end, when they were found (the
        # adapters that may still be admitted), the next one
        self._stops_key: tuple[tuple[int, ...], int] | None = None
        self._stop_at: list[int] = []
        self._stop_next = 0

    def count(self, waiting_by_adapter: dict[int, int], kv_holding: Iterable[Request]) -> None:
        """Start the tally from the gate's count of waiting requests per adapter
        less `kv_holding_waiting`'s; kept only if it adds up to this queue."""
        left = dict(waiting_by_adapter)
        deferred = self.owner.deferred_waiting
        held_deferred = 0
        for r in kv_holding:
            a = adapter_of(r)
            left[a] = left.get(a, 0) - 1
            held_deferred += r in deferred
        n = self._unvisited()
        undeferred = n - (len(deferred) - held_deferred)
        if sum(left.values()) == n and undeferred >= 0 and min(left.values(), default=0) >= 0:
            self.left, self.undeferred = left, undeferred
            self.first_left = set(self.owner._first)

    def _unvisited(self) -> int:
        """The requests the scan has not reached (in the heap, all it holds)."""
        return len(self.inner) - self.at

    def _passes_but(self, k: int, tail_left: dict[int, int], tail_undeferred: int) -> bool:
        """By the tally, in O(max_loras): would every request not yet visited
        but the last `k` (the tail: `tail_left` per adapter, `tail_undeferred`
        not deferred) be skipped with nothing else done (`_passes`)?"""
        owner, left = self.owner, self.left
        m = self._unvisited() - k
        if left is None or m <= 0 or owner._candidate is not None or self.first_left or owner._blocked \
                or self.undeferred != tail_undeferred:
            return False
        closed, held = owner._closed, owner._held
        if closed is None:
            return bool(held) and m == sum(left.get(a, 0) - tail_left.get(a, 0) for a in held if a > 0)
        return left.get(0, 0) == tail_left.get(0, 0) and all(
            left.get(a, 0) == tail_left.get(a, 0) for a in closed if a not in held)

    def _tail_first(self) -> bool:
        """If only the tail (arrived since the last scan, appended in order, not
        yet deferred) is left behind a prefix that would only be skipped,
        move the scan's place to the tail and end the scan after it (O(1));
        the prefix stays where it is, as vLLM's own skips would leave it."""
        tail = self.tail
        k = len(tail)
        if not self.fcfs or self.left is None or k > self._unvisited() \
                or self.owner._candidate is not None or self.first_left:
            return False
        if self._tail_stats is None:  # once a scan: the tail is unvisited while k <= the unvisited
            if k and any(x is not y for x, y in zip(reversed(self.inner), reversed(tail), strict=False)):
                self.left = None  # something else joined behind them, or one left: no tally
                return False
            tail_left: dict[int, int] = {}
            for r in tail:
                a = adapter_of(r)
                tail_left[a] = tail_left.get(a, 0) + 1
            deferred = self.owner.deferred_waiting
            self._tail_stats = (tail_left, sum(r not in deferred for r in tail))
        if not self._passes_but(k, *self._tail_stats):
            return False
        self.prefix = self._unvisited() - k
        self.at = self.tail_at = len(self.inner) - k
        self.owner.tails_first += 1
        return True

    def _settle(self, skipped: Iterable[Request]) -> None:
        """The deque as vLLM's own skips leave it once its scan is over: the
        requests vLLM popped and did not put back leave their places, the last
        first; nothing else moved. A request put back that this scan did not
        pop goes to the front, as vLLM's own put-back would put it."""
        skipped = list(skipped)
        back = set(skipped)
        popped, self.popped = self.popped, []
        self._it = None
        q = self.inner
        for place, r in reversed(popped):
            if r in back:
                back.discard(r)
            else:
                del q[place]
        if back:
            q.extendleft([r for r in skipped if r in back])

    def _visited(self, r: Request) -> None:
        left = self.left
        if left is not None:
            left[adapter_of(r)] -= 1
            self.undeferred -= r not in self.owner.deferred_waiting
            self.first_left.discard(r.request_id)

    @staticmethod
    def _passes(r: Request, closed: set[int] | None, held: set[int] | frozenset[int], first: set[str],
                deferred: set[Request]) -> bool:
        lora = r.lora_request
        if lora is None or lora.lora_int_id <= 0:
            return False
        a = lora.lora_int_id
        return ((a in held or (closed is not None and a not in closed)) and r.request_id not in first
                and r.status in PLAIN and not r.num_computed_tokens and r in deferred)

    def _pass_over(self) -> None:
        owner = self.owner
        closed, held = owner._closed, owner._held
        if (closed is None and not held) or owner._candidate is not None or not self.scanning:
            return
        first, deferred = owner._first, owner.deferred_waiting
        if self.fcfs:  # the run at the scan's place that vLLM's visits would skip: read past it
            if self.at >= len(self.inner) or not self._passes(self.inner[self.at], closed, held, first, deferred):
                return  # no run: nothing to find
            n = self._jump(eager=False)
            if n is None:  # walk; a stretch first when the tally could place the run's end after all
                stretch = max(_STRETCH, self._unvisited() // 16)
                n = self._walk(closed, held, first, deferred, stretch)
                if n == stretch:
                    self.at += n
                    owner.passed += n
                    n = self._jump()
                    if n is None:
                        n = self._walk(closed, held, first, deferred)
            self.at += n
            owner.passed += n
            # After a jump the run holds no request of an adapter the scan may
            # still admit, whose counts are all the tally reads from then on
            # (the cap stays closed to the scan's end, and the held adapters
            # only grow), so the others' counts are left as they were.
            return
        q, passes = self.inner, self._passes  # the heap's order: its top, while it passes
        run = []
        while q and passes(q.peek_request(), closed, held, first, deferred):
            run.append(q.pop_request())
        if run:
            self.taken += run
            self.aside.update(run)
            owner.passed += len(run)
            left = self.left
            if left is not None:  # all deferred: only the adapters' counts move
                for r in run:
                    left[r.lora_request.lora_int_id] -= 1

    def _iter_at(self) -> Iterator[Request]:
        """An iterator over the deque from the scan's place: one, kept through
        the scan (nothing changes the deque while it runs), moved on at C
        speed; a new one when the deque changed or it is past the place."""
        it, k = self._it, self.at - self._it_at
        if it is None or k < -1:
            it, k = iter(self.inner), self.at
        elif k == -1:  # the request read last, not passed over, is the place's
            it, k = chain((self.inner[self.at],), it), 0
        if k:
            next(islice(it, k, k), None)
        self._it, self._it_at = it, self.at
        return it

    def _walk(self, closed: set[int] | None, held: set[int] | frozenset[int], first: set[str],
              deferred: set[Request], limit: int | None = None) -> int:
        """The run's length, request by request from the scan's place (each
        one's adapter counted off the tally, all being deferred), or `limit`
        when the run is at least that long."""
        n, plain, left = 0, PLAIN, self.left
        it = self._iter_at()
        for r in it if limit is None else islice(it, limit):  # `_passes`, inlined: most of a long backlog's scan
            lora = r.lora_request
            if lora is None:
                break
            a = lora.lora_int_id
            if a <= 0 or not (a in held or (closed is not None and a not in closed)) \
                    or r.status not in plain or r.num_computed_tokens or r not in deferred \
                    or r.request_id in first:
                break
            n += 1
            if left is not None:
                left[a] -= 1
        else:
            self._it_at = self.at + n
            return n
        self._it_at = self.at + n + 1  # read, not passed over
        return n

    def _jump(self, *, eager: bool = True) -> int | None:
        """The run's length by the tally, or None when it cannot tell (or, not
        `eager`, when the places to find are many: `_pass_over` walks a stretch
        first). The run ends at the first request of an adapter the scan may
        still admit (the base model, those in `cap_closed` not held) or of the
        tail; their places are found once (`_places`) and must match the
        tally's count, and nothing moves in the deque while the scan runs."""
        owner, left, tail = self.owner, self.left, self.tail
        closed, held = owner._closed, owner._held
        if left is None or closed is None or owner._blocked or self.first_left or self.prefix is not None:
            return None
        if self._tail_stats is None or self._unvisited() < len(tail):
            return None
        tail_left, tail_undeferred = self._tail_stats
        if self.undeferred != tail_undeferred:
            return None
        admissible = [0, *(a for a in closed if a not in held)]
        key = (tuple(admissible), len(held))
        if self._stops_key != key:
            want = sum(left.get(a, 0) for a in admissible) + sum(
                v for a, v in tail_left.items() if a not in admissible)
            if not eager and 10 * want > self._unvisited():
                return None
            by = owner._by_adapter
            stops = set(tail).union(*(by.get(a, ()) for a in admissible))
            places = self._places(stops, want)
            if places is None:
                self.left = None  # the driver's sets and the tally disagree: walk, this scan
                return None
            self._stops_key, self._stop_at, self._stop_next = key, places, 0
        at, here = self._stop_at, self.at
        i = self._stop_next
        while i < len(at) and at[i] < here:
            i += 1
        self._stop_next = i
        return at[i] - here if i < len(at) else len(self.inner) - here

    def _places(self, stops: set[Request], want: int) -> list[int] | None:
        """The places of `stops` in the deque from the scan's place on, in
        order, or None when they are not `want`. When they are few (a tenth of
        the requests not yet visited, or less), each is looked for where the
        last scan found it (`owner._stop_back`, its distance from the back)
        and checked request by request (`deque[i] is r`), else found by
        `deque.index`; otherwise one pass over the deque finds them. The
        places found, when few, are kept for the next scan."""
        q, here, owner, tail = self.inner, self.at, self.owner, self.tail
        n, k = len(q), len(tail)
        few = 10 * len(stops) <= n - here
        places: list[int] | None = None
        found: list[Request] = []
        if few and owner._stop_back:
            found = list(stops.difference(tail, [r for _, r in self.popped]))
            back = list(map(owner._stop_back.get, map(id, found)))
            if None not in back:
                m = n - k
                places = [m - d for d in back]
                if min(places, default=here) < here or not all(map(is_, map(q.__getitem__, places), found)):
                    places = None
                    with suppress(ValueError):  # not found from its place on: look everywhere
                        places = list(map(q.index, found, [max(p, here) for p in [m - d for d in back]]))
                if places is not None:
                    found += tail
                    places += range(m, n)
        if places is None:
            flags = list(map(stops.__contains__, self._iter_at()))
            self._it = None  # read to the end
            places = list(compress(count(here), flags))
            found = list(map(q.__getitem__, places)) if few else []
        if len(places) != want:
            return None
        if few:
            owner._stop_back = {id(r): n - p for r, p in zip(found, places, strict=True)}
            places.sort()
        return places

    def __bool__(self) -> bool:
        """What vLLM's loop asks before each visit: the run at the scan's place
        it would only skip is passed over first; and when the tally shows
        that it would only skip the rest, the scan ends here (False, once),
        which leaves the queue as those skips would: in place, in order.
        Should that fail, the owner falls back to vLLM's rule (`_fault`),
        which passes nothing over, and the scan reads on from its place."""
        if not self.scanning:
            return len(self) > 0
        try:
            return self._ask()
        except Exception as exc:
            self.owner._fault("pass-over", None, exc)
            self.left = None
            return self._unvisited() > 0

    def _ask(self) -> bool:
        if self.prefix is None and not self._tail_first():
            self._pass_over()
            return self._unvisited() > 0
        if self.at < len(self.inner):  # the tail, first
            return True
        self.scanning = False  # the prefix, which would only be skipped
        self.owner.passed += self.prefix
        return False

    # What vLLM peeks right after asking is what it pops: nothing is passed over between.
    def peek_request(self) -> Request:
        return self.inner[self.at] if self.fcfs else self.inner.peek_request()

    def pop_request(self) -> Request:
        if self.fcfs:
            out = self.inner[self.at]
            self.popped.append((self.at, out))
            self.at += 1
        else:
            out = self.inner.pop_request()
            self.taken.append(out)
        self._visited(out)
        return out

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        """vLLM's skipped requests back (its scan is over): in the FCFS deque,
        the ones it took and did not put back leave their places (`_settle`);
        in the heap, the passed-over ones are pushed back with them."""
        self.scanning = False
        if self.fcfs:
            self._settle(requests)
            return
        if not self.aside:
            self.inner.prepend_requests(requests)
            return
        aside, self.aside = self._aside(), set()
        self.inner.prepend_requests([*requests, *aside])

    def restore(self) -> Any:
        """After the scan: vLLM's own queue, as its skips leave it (vLLM put
        nothing back when it skipped none of its own)."""
        if self.popped or self.aside:
            self.prepend_requests(())
        self.scanning = False
        return self.inner

    def _aside(self) -> list[Request]:
        return list(filter(self.aside.__contains__, self.taken))

    # vLLM's loop only asks, peeks and pops until it puts its skipped requests
    # back; the rest keeps the passed-over requests waiting, where they were.
    # In the FCFS deque a change while the scan runs (none comes from vLLM's
    # loop) drops the tally and the places found, and moves the scan's place
    # and the popped ones' with it.
    def _changed(self) -> None:
        self._it, self._stops_key, self.left = None, None, None

    def prepend_request(self, request: Request) -> None:
        if self.fcfs and (self.scanning or self.popped):  # ahead of what the scan has not visited
            self._changed()
            self.inner.insert(self.at, request)
            return
        self.inner.prepend_request(request)

    def add_request(self, request: Request) -> None:
        if self.fcfs and (self.scanning or self.popped):
            self._changed()
        self.inner.add_request(request)

    def remove_request(self, request: Request) -> None:
        self.remove_requests([request])

    def remove_requests(self, requests: Iterable[Request]) -> None:
        requests = list(requests)
        self._stops_key = None  # `_jump`'s places move
        if self.fcfs:
            if self.scanning or self.popped:
                self._changed()
                gone = set(requests)
                places = [i for i, r in enumerate(self.inner) if r in gone]  # O(queue): no scan calls this

                def moved(p: int) -> int:
                    return p - sum(1 for i in places if i < p)

                if self.prefix is not None:
                    start = self.tail_at - self.prefix
                    self.prefix -= sum(1 for i in places if start <= i < self.tail_at)
                    self.tail_at = moved(self.tail_at)
                self.popped = [(moved(p), r) for p, r in self.popped if r not in gone]
                self.at = moved(self.at)
            self.inner.remove_requests(requests)
            return
        out = self.aside.intersection(requests)
        if out:
            self.aside -= out
            self.taken = [r for r in self.taken if r not in out]
        self.inner.remove_requests([r for r in requests if r not in out])

    def __len__(self) -> int:
        return len(self.inner) - len(self.popped) + len(self.aside)

    def __iter__(self) -> Iterator[Request]:
        """The requests waiting, in the order the queue will have if the scan
        ends now (vLLM's popped ones are not waiting until put back)."""
        if self.popped:
            out = {id(r) for _, r in self.popped}
            return iter([r for r in self.inner if id(r) not in out])
        return iter([*self._aside(), *self.inner])


def salvage(queue: Any) -> Any:
    """vLLM's own queue under the scan's wrappers, after one of them failed:
    every request still waiting, once (a pass-over's requests set aside go
    back; those its scan popped and admitted leave)."""
    while isinstance(queue, (PassOverQueue, ScanOrderQueue)):
        if isinstance(queue, PassOverQueue) and queue.aside:
            queue.inner.prepend_requests(queue._aside())
        queue = queue.inner
    if isinstance(queue, deque):
        seen: set[Request] = set()
        keep = [r for r in queue if r.status != RequestStatus.RUNNING and not r.is_finished()
                and not (r in seen or seen.add(r))]
        queue.clear()
        queue.extend(keep)
    return queue
