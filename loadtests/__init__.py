"""Tools that drive a running Kronos service from outside: the locust users (``locustfile``),
the headless load test (``run``: ``kronos loadtest``), the soak with its probe, chaos and report
(``soak*``: ``kronos soak``) and the service-against-engine benchmark (``bench``:
``kronos bench service``). They may import ``service`` and ``kronos_core``; neither imports them.
Their commands are registered in ``commands.py``."""
