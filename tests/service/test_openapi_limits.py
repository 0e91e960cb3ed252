"""The served OpenAPI schema carries the loaded model's horizon limit (``service.app``)."""

import pytest

from service.app import api
from service.state import current


@pytest.fixture
def model_limit():
    state = current()
    before = state.max_horizon
    yield state
    state.max_horizon = before


def _horizon_schema() -> dict:
    return api.openapi()["components"]["schemas"]["ForecastRequest"]["properties"]["horizon"]


def test_the_schema_gives_the_static_ceiling_until_a_replica_described_the_model(model_limit):
    model_limit.max_horizon = None
    assert _horizon_schema()["maximum"] == 512


def test_the_schema_gives_the_model_s_max_context_once_known(model_limit):
    model_limit.max_horizon = 256
    assert _horizon_schema()["maximum"] == 256
    model_limit.max_horizon = 4096  # a longer context than the static ceiling: the ceiling holds
    assert _horizon_schema()["maximum"] == 512
    model_limit.max_horizon = None
    assert _horizon_schema()["maximum"] == 512  # the cached template was not changed
