"""Placement of shards on the predictor replicas: each shard goes to the replica with the least
work in flight, counted in tokens (``Shard.tokens``: rows x (lookback + horizon)), not in calls.

Serve's default router (power of two choices on queue length) counts calls: a replica running one
1,000-series shard looks as free as one running a 5-series shard, and it caches each replica's
queue length for up to 10 s, so a replica whose queue was full a moment ago (cancelled calls) is
skipped meanwhile. ``LeastTokensRouter`` is a Serve custom request router (Ray's
``serve.request_router`` API): it runs inside each gateway's handle to the Predictor deployment,
adds a shard's tokens to its replica when the shard is routed and takes them off when the call
completes, whatever the outcome (Serve calls ``on_request_completed`` once per routed call). It
ranks the replicas by those counts, least first; Serve then sends the shard to the first ranked
replica whose queue is not full, and backs off before asking again when every queue is full.
Each gateway counts the shards it sent; with several gateways each places by its own share of the
load.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

from ray.serve.request_router import (
    FIFOMixin,
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

from service.common.messages import Shard


class TokensInFlight:
    """Tokens in flight per replica, from the calls routed and not yet completed (no Ray).

    A call is known by (replica, call id); the id alone is not unique: every shard of one HTTP
    request carries the request's id, and hedged copies repeat it. Calls with the same key are
    completed in the order they were routed (their tokens may differ a little; once all of them
    complete, the replica's count is exact again)."""

    def __init__(self) -> None:
        self.by_replica: dict[Hashable, int] = {}
        self._calls: dict[tuple[Hashable, str], deque[int]] = {}
        self._ranked_first_at: dict[Hashable, int] = {}  # the ranking in which it was first
        self._rankings = 0

    def routed(self, call_id: str, replica: Hashable, tokens: int) -> None:
        self.by_replica[replica] = self.by_replica.get(replica, 0) + tokens
        self._calls.setdefault((replica, call_id), deque()).append(tokens)

    def completed(self, call_id: str, replica: Hashable) -> None:
        calls = self._calls.get((replica, call_id))
        if not calls:
            return  # not routed here (rejected, or completed already)
        tokens = calls.popleft()
        if not calls:
            del self._calls[(replica, call_id)]
        self.by_replica[replica] = max(0, self.by_replica.get(replica, 0) - tokens)

    def ranked(self, replicas: list[Any], key: Any = lambda r: r) -> list[Any]:
        """``replicas`` by tokens in flight, least first; ties to the one ranked first least
        recently (then in the order given). A call's tokens count only once its replica has
        accepted it, so the shards of one request, routed together, all see the same tokens; the
        tie-break takes turns instead of sending every one of them to the same replica."""
        order = sorted(replicas, key=lambda r: (self.by_replica.get(key(r), 0),
                                                self._ranked_first_at.get(key(r), -1)))
        if order:
            self._rankings += 1
            self._ranked_first_at[key(order[0])] = self._rankings
        return order


def request_tokens(args: list[Any]) -> int:
    """The tokens of a routed call: its shard's, 0 for any other call (``describe``)."""
    return int(args[0].tokens) if args and isinstance(args[0], Shard) else 0


class LeastTokensRouter(FIFOMixin, RequestRouter):
    """Serve request router of the Predictor deployment: least tokens in flight first.

    ``FIFOMixin`` is required, not a preference: every shard of one HTTP request carries that
    request's ``internal_request_id`` (Serve copies it from the gateway's request context), and
    the base router hands a chosen replica only to the pending call with the routing call's id,
    indexed once per id. Without the mixin the second and later shards of a request are never
    matched and wait, unrouted, until the gateway's shard deadline sends a copy."""

    def initialize_state(self, **kwargs: Any) -> None:
        self.in_flight = TokensInFlight()

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        ranked = self.in_flight.ranked(
            sorted(candidate_replicas, key=lambda r: r.replica_id.unique_id),
            key=lambda r: r.replica_id,
        )
        if pending_request is not None:
            # every replica is offered at once, so when all their queues are full Serve should wait
            # (exponential backoff) before asking again; without this flag its routing loop asks
            # again at once, forever, and spins a gateway core at 100% while the replicas are busy
            pending_request.routing_context.should_backoff = True
        # one rank each: Serve tries them in order, skipping full queues
        return [[r] for r in ranked]

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any
    ) -> None:
        self.in_flight.routed(
            pending_request.metadata.internal_request_id,
            replica_id,
            request_tokens(pending_request.args),
        )

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        self.in_flight.completed(internal_request_id, replica_id)
