"""The least-tokens placement of shards (``service.replica.router``): the counts it ranks replicas
by, without Ray's routing machinery (the live service uses it in tests/integration)."""

from service_fakes import make_shard

from service.replica.router import TokensInFlight, request_tokens


def test_replicas_rank_by_tokens_in_flight_not_by_calls():
    flight = TokensInFlight()
    flight.routed("big", "r1", 10_000)
    flight.routed("s1", "r2", 50)
    flight.routed("s2", "r2", 50)
    assert flight.ranked(["r1", "r2", "r3"]) == ["r3", "r2", "r1"]  # two small calls weigh less than one big
    flight.completed("big")
    assert flight.ranked(["r1", "r2"]) == ["r1", "r2"]
    flight.completed("big")  # once only (Serve calls it once per call; a second is ignored)
    flight.completed("unknown")
    assert flight.by_replica == {"r1": 0, "r2": 100}


def test_ties_keep_the_order_given():
    assert TokensInFlight().ranked(["b", "a", "c"]) == ["b", "a", "c"]


def test_a_call_weighs_its_shard_s_tokens():
    shard = make_shard(3, length=10)  # 3 series x 1 sample x (10 + 4)
    assert request_tokens([shard]) == shard.tokens == 42
    assert request_tokens([]) == 0  # describe()
