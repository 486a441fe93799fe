"""Connection-pool instrumentation: pool size, connections in use, discards when full.

boto3's urllib3 pool holds `max_pool_connections` connections. More parallel calls than
that still work, but each surplus connection is thrown away afterwards with the warning
"Connection pool is full, discarding connection" (a wasted TCP+TLS handshake per call,
botocore #619/#766). urllib3 reports a discard only through that log record, so a filter
on its logger counts every one; after the first, the filter keeps them out of the log
(the counter `agentrl_connection_pool_discarded_total` carries them, and a flood of
identical warnings hides real errors). In-use connections are counted where calls are
made (`InUseGauge`), which is exact, unlike reading urllib3's private queues.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

URLLIB3_POOL_LOGGER = "urllib3.connectionpool"
POOL_FULL_MESSAGE = "Connection pool is full, discarding connection"


class PoolDiscardCounter(logging.Filter):
    """Counts urllib3 pool-full discards; lets the first one through with a hint."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()  # urllib3 logs from the boto worker threads
        self._count = 0
        self._taken = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(POOL_FULL_MESSAGE):
            return True
        with self._lock:
            self._count += 1
            first = self._count == 1
        if first:
            record.msg = (
                f"{record.msg} (more parallel calls than agent.maxPoolConnections; further "
                "discards are counted in agentrl_connection_pool_discarded_total, not logged)"
            )
        return first

    def take(self) -> int:
        """Discards since the last call (for counter deltas)."""
        with self._lock:
            n, self._taken = self._count - self._taken, self._count
        return n

    @property
    def total(self) -> int:
        with self._lock:
            return self._count


_installed: list[PoolDiscardCounter] = []  # at most one, process-wide
_install_lock = threading.Lock()


def install_discard_counter() -> PoolDiscardCounter:
    """The process-wide counter on urllib3's pool logger (installed once)."""
    with _install_lock:
        if not _installed:
            logger = logging.getLogger(URLLIB3_POOL_LOGGER)
            # The record is only created when WARNING is enabled; the filter decides
            # what reaches the handlers, so enabling it here adds no noise.
            if not logger.isEnabledFor(logging.WARNING):
                logger.setLevel(logging.WARNING)
            _installed.append(PoolDiscardCounter())
            logger.addFilter(_installed[0])
        return _installed[0]


class InUseGauge:
    """Connections checked out right now, counted around each blocking call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0

    @contextmanager
    def hold(self) -> Iterator[None]:
        with self._lock:
            self._value += 1
        try:
            yield
        finally:
            with self._lock:
                self._value -= 1

    @property
    def value(self) -> int:
        return self._value
