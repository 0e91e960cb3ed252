"""Tokens in flight: the one measure by which work is placed, on replicas (the gateways' request
router) and on a replica's step loops (threads or child processes).

A shard weighs ``Shard.tokens`` (rows x (lookback + horizon)), not one call: a replica or loop
running a 1,000-series shard is not as free as one running a 5-series shard. ``TokenCounts`` holds
the count per place and picks the least loaded; ``TokensInFlight`` adds the router's bookkeeping
by call. No Ray, no threads of its own: callers that share one across threads hold its lock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

P = TypeVar("P", bound=Hashable)


class TokenCounts:
    """Tokens in flight per place (a replica, a step loop), added when a shard is placed there and
    taken off when its call ends, answered or not. Thread-safe."""

    def __init__(self, places: Iterable[Hashable] = ()):
        self._tokens: dict[Hashable, int] = {p: 0 for p in places}
        self.lock = threading.Lock()

    def add(self, place: Hashable, tokens: int) -> None:
        with self.lock:
            self._tokens[place] = self._tokens.get(place, 0) + tokens

    def take(self, place: Hashable, tokens: int) -> None:
        with self.lock:
            self._tokens[place] = max(0, self._tokens.get(place, 0) - tokens)

    def of(self, place: Hashable) -> int:
        with self.lock:
            return self._tokens.get(place, 0)

    def least(self, places: Iterable[P]) -> P:
        """The place with the fewest tokens in flight; the first given on a tie."""
        with self.lock:
            return min(places, key=lambda p: self._tokens.get(p, 0))

    def snapshot(self, places: Iterable[Hashable]) -> list[int]:
        with self.lock:
            return [self._tokens.get(p, 0) for p in places]


class TokensInFlight:
    """The router's tokens in flight per replica, from the calls routed and not yet completed.

    A call is known by (replica, call id); the id alone is not unique: every shard of one HTTP
    request carries the request's id, and hedged copies repeat it. Calls with the same key are
    completed in the order they were routed (their tokens may differ a little; once all of them
    complete, the replica's count is exact again)."""

    def __init__(self) -> None:
        self.counts = TokenCounts()
        self._calls: dict[tuple[Hashable, str], deque[int]] = {}
        self._ranked_first_at: dict[Hashable, int] = {}  # the ranking in which it was first
        self._rankings = 0

    @property
    def by_replica(self) -> dict[Hashable, int]:
        """Tokens in flight per replica seen so far."""
        with self.counts.lock:
            return dict(self.counts._tokens)

    def routed(self, call_id: str, replica: Hashable, tokens: int) -> None:
        self.counts.add(replica, tokens)
        self._calls.setdefault((replica, call_id), deque()).append(tokens)

    def completed(self, call_id: str, replica: Hashable) -> None:
        calls = self._calls.get((replica, call_id))
        if not calls:
            return  # not routed here (rejected, or completed already)
        tokens = calls.popleft()
        if not calls:
            del self._calls[(replica, call_id)]
        self.counts.take(replica, tokens)

    def ranked(
        self, replicas: list[Any], key: Callable[[Any], Hashable] = lambda r: r
    ) -> list[Any]:
        """``replicas`` by tokens in flight, least first; ties to the one ranked first least
        recently (then in the order given). A call's tokens count only once its replica has
        accepted it, so the shards of one request, routed together, all see the same tokens; the
        tie-break takes turns instead of sending every one of them to the same replica."""
        order = sorted(
            replicas,
            key=lambda r: (self.counts.of(key(r)), self._ranked_first_at.get(key(r), -1)),
        )
        if order:
            self._rankings += 1
            self._ranked_first_at[key(order[0])] = self._rankings
        return order
