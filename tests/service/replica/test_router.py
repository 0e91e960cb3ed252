"""The least-tokens placement of shards (``service.replica.router``): the counts it ranks replicas
by, without Ray's routing machinery (the live service uses it in tests/integration)."""

from service_fakes import make_shard

from service.replica.router import TokensInFlight, request_tokens


def test_replicas_rank_by_tokens_in_flight_not_by_calls():
    flight = TokensInFlight()
    flight.routed("big", "r1", 10_000)
    flight.routed("s1", "r2", 50)
    flight.routed("s2", "r2", 50)
    # two small calls weigh less than one big
    assert flight.ranked(["r1", "r2", "r3"]) == ["r3", "r2", "r1"]
    flight.completed("big", "r1")
    assert flight.ranked(["r1", "r2"]) == ["r1", "r2"]
    flight.completed("big", "r1")  # once only (Serve calls it once per call; a second is ignored)
    flight.completed("unknown", "r1")
    flight.completed("s1", "r1")  # routed to r2, not r1: nothing to take off r1
    assert flight.by_replica == {"r1": 0, "r2": 100}


def test_shards_of_one_request_share_its_id_and_each_is_counted():
    """Serve gives every call made inside one HTTP request that request's id: the shards of a
    request (and hedged copies) are told apart by replica and counted one by one."""
    flight = TokensInFlight()
    flight.routed("req", "r1", 300)
    flight.routed("req", "r2", 200)
    flight.routed("req", "r2", 100)  # a hedged copy, or a second shard on the same replica
    assert flight.by_replica == {"r1": 300, "r2": 300}
    flight.completed("req", "r2")
    assert flight.by_replica == {"r1": 300, "r2": 100}
    flight.completed("req", "r1")
    flight.completed("req", "r2")
    assert flight.by_replica == {"r1": 0, "r2": 0}
    flight.completed("req", "r2")  # no call left: ignored
    assert flight.by_replica == {"r1": 0, "r2": 0}


def test_the_router_matches_pending_calls_in_fifo_order_not_by_request_id():
    """Without FIFOMixin, Serve's base router gives a chosen replica only to the pending call with
    the routing call's id, indexed once per id; shards sharing their request's id then wait."""
    from ray.serve.request_router import FIFOMixin

    from service.replica.router import LeastTokensRouter

    assert issubclass(LeastTokensRouter, FIFOMixin)
    mro = LeastTokensRouter.__mro__
    fulfil = next(c for c in mro if "_fulfill_next_pending_request" in vars(c))
    assert fulfil is FIFOMixin


def test_ties_go_round_so_shards_routed_together_spread():
    """A call's tokens count once its replica accepts it: shards routed together see equal counts,
    and the tie-break (first least recently) takes turns over the replicas."""
    flight = TokensInFlight()
    assert flight.ranked(["b", "a", "c"]) == ["b", "a", "c"]  # first ranking: the order given
    assert [flight.ranked(["a", "b", "c"])[0] for _ in range(5)] == ["a", "c", "b", "a", "c"]
    flight.routed("x", "b", 10)
    firsts = [flight.ranked(["a", "b", "c"])[0] for _ in range(4)]
    assert sorted(firsts) == ["a", "a", "c", "c"]  # the busy one never first, the others in turn


def test_a_new_replica_takes_its_turn_without_a_catch_up_burst():
    flight = TokensInFlight()
    for _ in range(50):
        flight.ranked(["old"])
    firsts = [flight.ranked(["old", "new"])[0] for _ in range(6)]
    assert firsts == ["new", "old", "new", "old", "new", "old"]


def test_a_call_weighs_its_shard_s_tokens():
    shard = make_shard(3, length=10)  # 3 series x 1 sample x (10 + 4)
    assert request_tokens([shard]) == shard.tokens == 42
    assert request_tokens([]) == 0  # describe()


def test_the_router_offers_every_replica_least_tokens_first_and_lets_serve_back_off():
    """All replicas are offered in one call, so when all their queues are full Serve must back off
    before asking again; without ``should_backoff`` its routing loop re-asks at once and spins a
    gateway core at 100% (the slow-replica fault test stalled on that)."""
    import asyncio
    from collections import namedtuple
    from types import SimpleNamespace

    from service.replica.router import LeastTokensRouter

    router = LeastTokensRouter.__new__(LeastTokensRouter)  # no Serve machinery: the ranking only
    router.initialize_state()
    replica_id = namedtuple("replica_id", "unique_id")  # hashable, like Serve's ReplicaID
    replicas = [SimpleNamespace(replica_id=replica_id(u)) for u in ("b", "a", "c")]
    router.in_flight.routed("x", replicas[1].replica_id, 500)  # "a" is busy
    pending = SimpleNamespace(routing_context=SimpleNamespace(should_backoff=False))
    ranks = asyncio.run(router.choose_replicas(replicas, pending))
    assert [[r.replica_id.unique_id for r in rank] for rank in ranks] == [["b"], ["c"], ["a"]]
    assert pending.routing_context.should_backoff is True
    firsts = [asyncio.run(router.choose_replicas(replicas, pending))[0][0].replica_id.unique_id
              for _ in range(4)]  # the next calls: the tie between b and c goes round, a stays last
    assert sorted(firsts) == ["b", "b", "c", "c"]
