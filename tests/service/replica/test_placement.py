"""Tokens in flight (``service.replica.placement``), the one count that places shards on replicas
(the router) and on a replica's step loops (threads and child processes)."""

from service.replica.placement import TokenCounts, TokensInFlight


def test_the_least_loaded_place_has_the_fewest_tokens_and_ties_go_to_the_first_given():
    counts = TokenCounts(range(3))
    assert counts.least(range(3)) == 0
    counts.add(0, 50)
    counts.add(1, 10)
    assert counts.least(range(3)) == 2
    counts.add(2, 10)
    assert counts.least(range(3)) == 1  # 1 and 2 tie: the first given
    assert counts.least([2, 1]) == 2
    counts.take(0, 50)
    assert counts.snapshot(range(3)) == [0, 10, 10] and counts.least(range(3)) == 0
    counts.take(1, 99)  # never below zero
    assert counts.of(1) == 0


def test_the_router_counts_calls_with_the_same_helper():
    flight = TokensInFlight()
    flight.routed("r1", "a", 30)
    flight.routed("r1", "b", 5)
    assert flight.by_replica == {"a": 30, "b": 5}
    assert flight.ranked(["a", "b"]) == ["b", "a"]
    flight.completed("r1", "a")
    assert flight.counts.of("a") == 0
