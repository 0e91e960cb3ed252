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
replica whose queue is not full. Each gateway counts the shards it sent; with several gateways
each places by its own share of the load.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from service.common.messages import Shard


class TokensInFlight:
    """Tokens in flight per replica, from the shards routed and not yet completed (no Ray)."""

    def __init__(self) -> None:
        self.by_replica: dict[Hashable, int] = {}
        self._calls: dict[str, tuple[Hashable, int]] = {}

    def routed(self, call_id: str, replica: Hashable, tokens: int) -> None:
        self.by_replica[replica] = self.by_replica.get(replica, 0) + tokens
        self._calls[call_id] = (replica, tokens)

    def completed(self, call_id: str) -> None:
        replica, tokens = self._calls.pop(call_id, (None, 0))
        if replica is not None:
            self.by_replica[replica] = max(0, self.by_replica.get(replica, 0) - tokens)

    def ranked(self, replicas: list[Any], key: Any = lambda r: r) -> list[Any]:
        """``replicas`` by tokens in flight, least first; ties in the order given."""
        return sorted(replicas, key=lambda r: self.by_replica.get(key(r), 0))


def request_tokens(args: list[Any]) -> int:
    """The tokens of a routed call: its shard's, 0 for any other call (``describe``)."""
    return int(args[0].tokens) if args and isinstance(args[0], Shard) else 0


class LeastTokensRouter(RequestRouter):
    """Serve request router of the Predictor deployment: least tokens in flight first."""

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
        self.in_flight.completed(internal_request_id)
