"""Leader election on a coordination.k8s.io/v1 Lease, so that one operator replica acts.

With two or more replicas, exactly one may reconcile, write status and post events; the
others wait and take over when the leader's Lease lapses. The Lease API is the mechanism and
this module does what client-go's `tools/leaderelection` does with it (read at v0.31.14:
https://github.com/kubernetes/client-go/blob/v0.31.14/tools/leaderelection/leaderelection.go
and .../resourcelock/leaselock.go), in asyncio:

- `try_acquire_or_renew`: the leader first renews with the Lease it last wrote (the fast
  path). Otherwise read the Lease (create it if absent); a record that changed since the
  last read restarts the lease clock *as observed here* (`observed_at`, this process's
  monotonic clock, never the holder's timestamps, so clock skew between nodes does not
  matter); a holder whose lease has not run out on that clock is left alone; else write
  ourselves as holder, conditional on the resourceVersion read (a 409 means another replica
  got there first). Taking over from another holder counts a transition; renewing keeps the
  acquire time.
- `acquire`: try every retry period, jittered by up to 1.2 times it (client-go's
  `JitterFactor`), until it succeeds.
- `renew`: try every retry period; a round that cannot renew within the renew deadline ends
  the leadership, and so does seeing another holder (client-go stops acting then too: its
  `IsLeader()` turns false, though its renew loop waits out the round).
- `release`: on a clean stop, write an empty holder with a one-second duration, so the next
  candidate takes over at its next try instead of after a whole lease duration. Only once
  everything the lease guards has stopped (client-go's `ReleaseOnCancel` contract).

One addition: `leading()` is also a fence on time. It holds only while the last successful
write of the Lease was *sent* less than a renew deadline ago. Another replica can take over
only a whole lease duration after it *saw* that write, which is later, and the lease
duration exceeds the renew deadline; so a leader whose event loop stalled (a frozen pod, a
partition) stops writing before anyone else may start, even before its renew loop wakes up
to notice. The controller's Kubernetes client asks this fence before every write.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import aiohttp

from agentrl.controller.kube import Kube, KubeError

logger = logging.getLogger("agentrl.controller.leader")
T = TypeVar("T")
LEASE_API = "coordination.k8s.io/v1"
# client-go's wait.JitterUntil factor for the acquire loop: each wait is the retry period
# plus up to 1.2 times it, so candidates that failed together do not retry together.
JITTER = 1.2
# The usual durations (client-go's, controller-runtime's and KubeRay's defaults), seconds.
LEASE_DURATION = 15
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0
# Errors of one attempt: the attempt fails and the next one tries again.
ATTEMPT_ERRORS = (KubeError, aiohttp.ClientError, OSError, TimeoutError)


@dataclass(frozen=True)
class Timing:
    """The three durations of client-go's LeaderElectionConfig, in seconds."""

    lease_duration: int = LEASE_DURATION  # whole seconds: the Lease records an integer
    renew_deadline: float = RENEW_DEADLINE
    retry_period: float = RETRY_PERIOD

    def problems(self) -> list[str]:
        """What client-go's NewLeaderElector would refuse, as sentences."""
        out = []
        if self.retry_period <= 0:
            out.append("the retry period must be greater than 0")
        if self.lease_duration <= self.renew_deadline:
            out.append(f"the lease duration ({self.lease_duration:g}s) must be greater than "
                       f"the renew deadline ({self.renew_deadline:g}s)")  # fmt: skip
        if self.renew_deadline <= JITTER * self.retry_period:
            out.append(f"the renew deadline ({self.renew_deadline:g}s) must be greater than "
                       f"{JITTER:g} x the retry period ({self.retry_period:g}s)")  # fmt: skip
        return out

    @property
    def takeover_bound(self) -> float:
        """Longest a standby waits, after it last saw the leader renew, before it holds the
        Lease: a lease duration, then at most one jittered retry (plus the request itself)."""
        return self.lease_duration + (1 + JITTER) * self.retry_period


@dataclass(frozen=True)
class Record:
    """client-go's LeaderElectionRecord, as a Lease's spec carries it."""

    holder: str
    lease_duration: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> Record:
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


def micro_time(moment: datetime | None = None) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC), as Lease times are written."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Lock(Protocol):
    """What the elector needs of a lock (client-go's resourcelock.Interface, less events)."""

    identity: str

    def describe(self) -> str: ...
    async def get(self) -> Record | None: ...
    async def create(self, record: Record) -> bool: ...
    async def update(self, record: Record) -> None: ...


class LeaseLock:
    """The Lease object's I/O (client-go's resourcelock.LeaseLock): read it, create it, and
    write it back conditional on the resourceVersion this lock last read or wrote."""

    def __init__(
        self, kube: Kube, namespace: str, name: str, identity: str,
        relogin: Callable[[], Awaitable[None]] | None = None,
    ) -> None:  # fmt: skip
        if not identity:
            raise ValueError("a leader election identity must not be empty")
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self._relogin = relogin  # an expired token: log in again before the next attempt
        self._lease: dict[str, Any] | None = None  # as last read or written

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def get(self) -> Record | None:
        """The current record, or None when there is no Lease."""
        lease = await self._io(self.kube.get(LEASE_API, "Lease", self.namespace, self.name))
        self._lease = lease
        return None if lease is None else Record.of(lease.get("spec") or {})

    async def create(self, record: Record) -> bool:
        """Create the Lease holding `record`; False when another replica created it first."""
        created, _ = await self._io(self.kube.create({
            "apiVersion": LEASE_API, "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record.spec(),
        }))  # fmt: skip
        if created is None:
            return False
        self._lease = created
        return True

    async def update(self, record: Record) -> None:
        """Write `record` over the Lease last seen; a KubeError (409) if it changed since."""
        if self._lease is None:
            raise RuntimeError("lease not read yet: get or create it first")
        lease = {**self._lease, "spec": record.spec()}
        self._lease = await self._io(self.kube.replace(lease))

    async def _io(self, request: Awaitable[T]) -> T:
        try:
            return await request
        except KubeError as err:
            if err.status == 401 and self._relogin is not None:
                await self._relogin()
            raise


class LeaderElector:
    """client-go's LeaderElector over a LeaseLock, with `leading()` as the write fence."""

    def __init__(
        self, lock: Lock, timing: Timing = Timing(), *,
        wall: Callable[[], str] = micro_time, rand: Callable[[], float] = random.random,
    ) -> None:  # fmt: skip
        problems = timing.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self.lock, self.timing, self._wall, self._rand = lock, timing, wall, rand
        self.identity = lock.identity
        self.observed: Record | None = None  # the record as last read or written here
        self.observed_at = 0.0  # when it was (this loop's monotonic clock)
        self.renewed_at: float | None = None  # when our last successful write was sent
        self._reported: str | None = None  # the holder last logged

    # ---- the fence -------------------------------------------------------------------

    def holds(self) -> bool:
        """The last record seen names this replica (client-go's IsLeader)."""
        return self.observed is not None and self.observed.holder == self.identity

    def leading(self) -> bool:
        """May this replica write now: it holds the Lease, renewed within a renew deadline."""
        return (self.holds() and self.renewed_at is not None
                and _now() - self.renewed_at < self.timing.renew_deadline)  # fmt: skip

    @property
    def leader(self) -> str:
        """The holder last seen ("" for none), for logs and the health endpoint."""
        return self.observed.holder if self.observed is not None else ""

    # ---- one attempt -----------------------------------------------------------------

    async def try_acquire_or_renew(self) -> bool:
        """One round of client-go's tryAcquireOrRenew; True when this replica now holds it."""
        sent, stamp = _now(), self._wall()
        mine = Record(self.identity, self.timing.lease_duration, stamp, stamp, 0)
        # 1. The fast path: the leader renews over the Lease it last wrote.
        if self.holds() and self._valid(sent) and self.observed is not None:
            renewal = replace(mine, acquire_time=self.observed.acquire_time,
                              transitions=self.observed.transitions)  # fmt: skip
            try:
                await self.lock.update(renewal)
            except ATTEMPT_ERRORS as err:
                logger.info("renewing Lease %s over the last one written failed (%s); "
                            "reading it again", self.lock.describe(), err)  # fmt: skip
            else:
                return self._wrote(renewal, sent)
        # 2. Read it, or create it.
        try:
            current = await self.lock.get()
            if current is None:
                created = await self.lock.create(mine)
                return self._wrote(mine, sent) if created else False
        except ATTEMPT_ERRORS as err:
            logger.warning("reading Lease %s failed: %s", self.lock.describe(), err)
            return False
        # 3. A changed record restarts the lease clock, as seen here.
        if current != self.observed:
            self.observed, self.observed_at = current, _now()
            self._report()
        if current.holder and self._valid(_now()) and not self.holds():
            return False
        # 4. Take it over (a new term) or renew it (the same term).
        if self.holds():
            mine = replace(mine, acquire_time=current.acquire_time,
                           transitions=current.transitions)  # fmt: skip
        else:
            mine = replace(mine, transitions=current.transitions + 1)
        try:
            await self.lock.update(mine)
        except ATTEMPT_ERRORS as err:
            logger.info("writing Lease %s failed: %s", self.lock.describe(), err)
            return False
        return self._wrote(mine, sent)

    def _valid(self, now: float) -> bool:
        """The observed record's lease has not run out, on this replica's clock."""
        duration = self.observed.lease_duration if self.observed is not None else 0
        return self.observed_at + duration > now

    def _wrote(self, record: Record, sent: float) -> bool:
        self.observed, self.observed_at, self.renewed_at = record, _now(), sent
        self._report()
        return True

    def _report(self) -> None:
        if self.leader != self._reported:
            self._reported = self.leader
            logger.info("Lease %s: the leader is now %s", self.lock.describe(),
                        self.leader or "nobody (released)")  # fmt: skip

    # ---- the loops -------------------------------------------------------------------

    async def acquire(self) -> None:
        """Return once this replica holds the Lease (client-go's acquire loop)."""
        logger.info("waiting to lead: Lease %s, identity %s", self.lock.describe(), self.identity)
        while not await self.try_acquire_or_renew():
            period = self.timing.retry_period
            await asyncio.sleep(period + self._rand() * JITTER * period)
        logger.info("acquired Lease %s: this replica leads", self.lock.describe())

    async def renew(self) -> None:
        """Keep the Lease; return when it is lost (not renewed within the renew deadline,
        or another holder seen). Cancel it to stop renewing."""
        while True:
            try:
                async with asyncio.timeout(self.timing.renew_deadline):
                    while not await self.try_acquire_or_renew():
                        if self.observed is not None and self.observed.holder not in (
                            self.identity, ""):  # fmt: skip
                            logger.error("Lease %s is held by %s now", self.lock.describe(),
                                         self.observed.holder)  # fmt: skip
                            return
                        await asyncio.sleep(self.timing.retry_period)
            except TimeoutError:
                logger.error("could not renew Lease %s within the renew deadline (%gs)",
                             self.lock.describe(), self.timing.renew_deadline)  # fmt: skip
                return
            await asyncio.sleep(self.timing.retry_period)

    async def release(self) -> bool:
        """Give the Lease up so that a standby takes over at its next try. Call only once
        nothing this replica runs under the Lease can still write."""
        if not self.holds() or self.observed is None:
            return True
        self.renewed_at = None  # the fence closes first
        stamp = self._wall()
        released = Record("", 1, stamp, stamp, self.observed.transitions)
        try:
            async with asyncio.timeout(self.timing.renew_deadline):
                await self.lock.update(released)
        except ATTEMPT_ERRORS as err:
            logger.warning("releasing Lease %s failed (%s): a standby takes over when it "
                           "runs out", self.lock.describe(), err)  # fmt: skip
            return False
        self.observed, self.observed_at = released, _now()
        logger.info("released Lease %s", self.lock.describe())
        return True


def _now() -> float:
    """The monotonic clock of the running loop (a fake one in tests)."""
    return asyncio.get_running_loop().time()
