"""What the gateway and the replicas share, so that neither imports the other: the messages
that cross between them (``messages``), the service's errors (``errors``), its settings
(``settings``), the HTTP schemas (``schemas``), the typed seams (``interfaces``) and the
Prometheus metrics (``metrics``). Imports nothing of ``service`` outside this folder."""
