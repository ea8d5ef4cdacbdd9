"""Python client of the mgrp agent's HTTP API (``crates/service/openapi.yaml``).

>>> from mgrp_client import Client
>>> c = Client("http://127.0.0.1:7241")
>>> r = c.estimate(peer="198.18.3.2", max_age="5s")    # doctest: +SKIP
>>> r.value, r.low, r.high, r.confidence                # doctest: +SKIP

Standard library only; ``to_dataframe()`` needs pandas (``pip install 'mgrp-client[pandas]'``).
"""

__version__ = "0.1.0"

from .errors import AgentUnreachable, ApiError, MgrpError, ProtocolError, RequestTimeout  # noqa: E402
from .models import (  # noqa: E402
    Counters,
    Event,
    Lagged,
    Passive,
    PathMetric,
    Point,
    Query,
    QueryEvent,
    Record,
    ScaleAnswer,
    Schedule,
    datetime_to_ns,
    ns_to_datetime,
    records_to_dataframe,
    records_to_dicts,
)
from .sse import SSEMessage, SSEParser  # noqa: E402
from .client import DEFAULT_URL, Client, EventStream  # noqa: E402

__all__ = [
    "__version__",
    "Client",
    "EventStream",
    "DEFAULT_URL",
    "MgrpError",
    "ApiError",
    "AgentUnreachable",
    "RequestTimeout",
    "ProtocolError",
    "PathMetric",
    "Record",
    "Point",
    "ScaleAnswer",
    "Schedule",
    "Counters",
    "Passive",
    "Event",
    "Lagged",
    "Query",
    "QueryEvent",
    "SSEMessage",
    "SSEParser",
    "records_to_dicts",
    "records_to_dataframe",
    "ns_to_datetime",
    "datetime_to_ns",
]
