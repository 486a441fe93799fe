"""What stamina schedules, captured: each retry with the wait it drew and what caused it.

Replaces stamina's default hooks (a log line, a Prometheus counter) for the duration, so a
test can check which failures were retried and that the waits are jittered, without
measuring any time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import stamina.instrumentation
from stamina.instrumentation import RetryDetails


@contextlib.contextmanager
def scheduled_retries() -> Iterator[list[RetryDetails]]:
    seen: list[RetryDetails] = []
    stamina.instrumentation.set_on_retry_hooks([seen.append])
    try:
        yield seen
    finally:
        stamina.instrumentation.set_on_retry_hooks(None)  # back to stamina's defaults
