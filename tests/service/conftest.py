"""Fixtures of the service unit tests; the fakes themselves live in service_fakes.py."""

import pytest
from service_fakes import FakeStore


@pytest.fixture
def fake_store():
    return FakeStore()
