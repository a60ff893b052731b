"""Python client for the sonde telemetry agent.

Emits metrics in sonde's msgpack protocol (metricserver2-compatible) over a
unix datagram, unix seqpacket or UDP socket. Emits never block and never do
I/O: points are buffered and a background thread sends them every 200 ms.

    from sonde_client import Client

    with Client(prefix="shop") as metrics:
        metrics.counter("orders", tags={"region": "eu"})
        metrics.timer("checkout.latency", 12.5)
        with metrics.timed("db.query", tags=[("table", "carts")]):
            run_query()
"""

from .client import Client, Timed
from .errors import (
    InvalidAddressError,
    InvalidNameError,
    InvalidTagError,
    InvalidValueError,
    ValidationError,
)
from .transport import default_address

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Timed",
    "ValidationError",
    "InvalidNameError",
    "InvalidTagError",
    "InvalidValueError",
    "InvalidAddressError",
    "default_address",
    "__version__",
]
