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
load. The counting is ``service.replica.placement``'s, the same the step loops are placed by.
"""

from __future__ import annotations

from typing import Any

from ray.serve.request_router import (
    FIFOMixin,
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

from service.common.messages import Shard
from service.replica.placement import TokensInFlight

__all__ = ["LeastTokensRouter", "TokensInFlight", "request_tokens"]


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
