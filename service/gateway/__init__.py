"""The gateway, one module per stage of a forecast request:

- ``prepare``: validation, store window reads or inline candles (``inline``), future
  timestamps (``future``); unusable series become per-symbol errors;
- ``shards``: the request's ``ForecastOptions`` (built once) and its memory-sized shards;
- ``dispatch``: shards sent to the replicas, re-sent when one dies, hedged when one is slow;
- ``gather``: results back in request order, risk summaries, client-safe messages;
- ``encode``: the JSON answer and the Arrow stream.

``core.ForecastPipeline`` walks a request through them. This package's face is the names below.
"""

from service.common.answer import ForecastAnswer
from service.common.errors import DeadlineExceeded, Overloaded, ReplicaGone, RequestInvalid
from service.gateway.core import ForecastPipeline
from service.gateway.dispatch import ShardRun
from service.gateway.encode import (
    answer_to_arrow,
    answer_to_json,
    quantile_label,
    summary_columns,
)
from service.gateway.future import FutureTimestamps
from service.gateway.gather import public_message
from service.gateway.prepare import Prepared
from service.gateway.shards import memory_model_fit

__all__ = [
    "DeadlineExceeded",
    "ForecastAnswer",
    "FutureTimestamps",
    "ForecastPipeline",
    "Overloaded",
    "Prepared",
    "ReplicaGone",
    "RequestInvalid",
    "ShardRun",
    "memory_model_fit",
    "answer_to_arrow",
    "answer_to_json",
    "public_message",
    "quantile_label",
    "summary_columns",
]
