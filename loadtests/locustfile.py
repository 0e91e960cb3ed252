"""``locust -f loadtests/locustfile.py --host http://127.0.0.1:8000``: the users live in
``service/locustfile.py`` (installed with the package, used by ``kronos loadtest``)."""

from service.locustfile import PortfolioUser, events, outcomes  # noqa: F401
