"""Leader election (agentrl.controller.leader) on a fake loop clock, against a Lease store with
the API server's optimistic concurrency (a write with a stale resourceVersion gets 409).

Every bound asserted here is the lease arithmetic itself, on looptime's fake clock: nothing
waits for real time, and nothing depends on how loaded the machine is. The same code runs
against a real kube-apiserver in tests/e2e/test_leader_e2e.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import re
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest

from agentrl.controller.config import ConfigError, load
from agentrl.controller.health import Health
from agentrl.controller.kube import Credentials, Kube, KubeError, NotLeading
from agentrl.controller.leader import (
    JITTER,
    LeaderElector,
    LeaseLock,
    Record,
    Timing,
)

TIMING = Timing()  # the defaults: 15 s lease, 10 s renew deadline, 2 s retry period
CONFLICT = '{"kind":"Status","reason":"Conflict","message":"the object has been modified"}'


class Store:
    """One Lease on an API server: a spec, a resourceVersion, and every write with its time."""

    def __init__(self) -> None:
        self.spec: dict[str, Any] | None = None
        self.rv = 0
        self.down = False  # every request fails, as when the API server is unreachable
        self.writes: list[tuple[float, str]] = []  # (loop time, holder)

    def write(self, spec: dict[str, Any]) -> None:
        self.spec, self.rv = spec, self.rv + 1
        self.writes.append((asyncio.get_running_loop().time(), spec["holderIdentity"]))

    def record(self) -> Record:
        assert self.spec is not None
        return Record.of(self.spec)


class MemoryLock:
    """A Lock over a Store, caching the resourceVersion it last saw, as LeaseLock does."""

    def __init__(self, store: Store, identity: str) -> None:
        self.store, self.identity, self.seen = store, identity, -1

    def describe(self) -> str:
        return "test/lease"

    async def _request(self) -> None:
        await asyncio.sleep(0.01)  # a request takes a moment
        if self.store.down:
            raise aiohttp.ClientConnectionError("connection refused")

    async def get(self) -> Record | None:
        await self._request()
        self.seen = self.store.rv
        return None if self.store.spec is None else self.store.record()

    async def create(self, record: Record) -> bool:
        await self._request()
        if self.store.spec is not None:
            return False
        self.store.write(record.spec())
        self.seen = self.store.rv
        return True

    async def update(self, record: Record) -> None:
        await self._request()
        if self.seen != self.store.rv:
            raise KubeError(409, "PUT", "/leases/lease", CONFLICT)
        self.store.write(record.spec())
        self.seen = self.store.rv


def elector(store: Store, name: str, seed: int = 0) -> LeaderElector:
    return LeaderElector(MemoryLock(store, name), TIMING, rand=random.Random(seed).random)


@contextlib.contextmanager
def running(*coros: Any) -> Iterator[list[asyncio.Task[Any]]]:
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()


async def now() -> float:
    return asyncio.get_running_loop().time()


async def until(condition: Callable[[], bool]) -> None:
    """Poll on the fake clock (every 0.1 s of loop time) until `condition()` holds."""
    while True:
        if condition():
            return
        await asyncio.sleep(0.1)


@pytest.mark.looptime
async def test_the_first_candidate_creates_the_lease_and_leads() -> None:
    store = Store()
    a = elector(store, "a")
    await a.acquire()
    assert a.leading() and a.holds()
    record = store.record()
    assert (record.holder, record.lease_duration, record.transitions) == ("a", 15, 0)
    assert record.acquire_time == record.renew_time


@pytest.mark.looptime
async def test_renewals_move_the_renew_time_and_keep_the_term() -> None:
    store = Store()
    a = elector(store, "a")
    await a.acquire()
    first = store.record()
    with running(a.renew()):
        await asyncio.sleep(9.5)
    # The create, a renewal straight after (client-go's renew loop starts with one), then one
    # every retry period (plus the request's own time).
    times = [t for t, holder in store.writes if holder == "a"]
    assert len(times) == len(store.writes) == 6
    assert all(2.0 <= b - a < 2.1 for a, b in itertools.pairwise(times[1:]))
    last = store.record()
    assert (last.acquire_time, last.transitions) == (first.acquire_time, 0)
    assert last.renew_time != first.renew_time


@pytest.mark.looptime
async def test_a_standby_takes_over_a_lease_duration_after_the_last_renewal_it_saw() -> None:
    """A killed leader (its renew loop stops without a release): the standby waits a whole
    lease duration from when it last saw the record change, then one jittered retry at most."""
    store = Store()
    a, b = elector(store, "a"), elector(store, "b", seed=7)
    await a.acquire()
    with running(a.renew(), b.acquire()) as (renewing, b_acquiring):
        await asyncio.sleep(60)
        assert not b_acquiring.done() and not b.leading() and a.leading()
        renewing.cancel()  # kill -9: no release
        last = store.writes[-1][0]
        await until(lambda: b.observed == store.record())  # b sees a's last renewal
        seen = b.observed_at
        await b_acquiring
    took_over = store.writes[-1][0]
    assert store.writes[-1][1] == "b"
    assert TIMING.lease_duration < took_over - seen <= TIMING.takeover_bound
    assert took_over - last <= TIMING.takeover_bound + (1 + JITTER) * TIMING.retry_period
    record = store.record()
    assert (record.holder, record.transitions) == ("b", 1)
    assert not a.leading()  # a's own fence closed a renew deadline after its last renewal


@pytest.mark.looptime
async def test_a_leader_that_cannot_renew_stops_before_a_standby_may_start() -> None:
    store = Store()
    a = elector(store, "a")
    await a.acquire()
    with running(a.renew()) as (renewing,):
        await asyncio.sleep(5)
        store.down = True
        sent = a.renewed_at
        assert sent is not None
        await until(lambda: not a.leading())
        closed = await now()
        await renewing
        stopped = await now()
    # The fence closes a renew deadline after the last renewal was sent; the renew loop gives
    # up within a retry period after that; both before anyone else may take over (a lease
    # duration after they saw that renewal, which is no earlier than it was sent).
    assert sent + TIMING.renew_deadline <= closed < sent + TIMING.renew_deadline + 0.2
    assert stopped <= sent + TIMING.retry_period + TIMING.renew_deadline + 0.1
    assert stopped < sent + TIMING.lease_duration


@pytest.mark.looptime
async def test_a_frozen_leader_is_fenced_by_time_alone() -> None:
    """No renew loop runs at all (a stopped process, a stalled loop): the fence still closes."""
    store = Store()
    a = elector(store, "a")
    await a.acquire()
    await asyncio.sleep(TIMING.renew_deadline - 0.5)
    assert a.leading()
    await asyncio.sleep(0.5)
    assert a.holds() and not a.leading()


@pytest.mark.looptime
async def test_a_leader_that_sees_another_holder_stops_at_once() -> None:
    store = Store()
    a = elector(store, "a")
    await a.acquire()
    with running(a.renew()) as (renewing,):
        await asyncio.sleep(3)
        # Another replica wrote itself in (it found a's lease run out while a was frozen).
        store.write(Record("c", 15, "t", "t", 1).spec())
        await renewing
        assert await now() < 3 + TIMING.retry_period + 0.5
    assert not a.leading() and a.leader == "c"


@pytest.mark.looptime
async def test_a_released_lease_is_taken_at_the_next_try_not_after_a_lease_duration() -> None:
    store = Store()
    a, b = elector(store, "a"), elector(store, "b", seed=3)
    await a.acquire()
    with running(a.renew(), b.acquire()) as (renewing, b_acquiring):
        await asyncio.sleep(20)
        renewing.cancel()
        assert await a.release()
        released = await now()
        assert not a.leading()
        record = store.record()
        assert (record.holder, record.lease_duration, record.transitions) == ("", 1, 0)
        await b_acquiring
    assert store.writes[-1][0] - released <= (1 + JITTER) * TIMING.retry_period + 0.1
    assert (store.record().holder, store.record().transitions) == ("b", 1)


@pytest.mark.looptime
async def test_two_standbys_racing_for_a_lapsed_lease_one_wins() -> None:
    store = Store()
    a = elector(store, "a")
    await a.acquire()
    b, c = elector(store, "b", seed=1), elector(store, "c", seed=2)
    # Both read the same record at the same moment, then both find it lapsed together.
    assert not await b.try_acquire_or_renew() and not await c.try_acquire_or_renew()
    await asyncio.sleep(TIMING.lease_duration + 1)
    won = await asyncio.gather(b.try_acquire_or_renew(), c.try_acquire_or_renew())
    assert sorted(won) == [False, True]
    winner = "b" if won[0] else "c"
    assert (store.record().holder, store.record().transitions) == (winner, 1)
    assert [h for _, h in store.writes] == ["a", winner]


@pytest.mark.looptime
async def test_an_unreachable_api_server_keeps_a_standby_waiting() -> None:
    store = Store()
    store.down = True
    b = elector(store, "b")
    with running(b.acquire()) as (acquiring,):
        await asyncio.sleep(30)
        assert not acquiring.done() and not b.leading()
        store.down = False
        await acquiring
    assert store.record().holder == "b"


@pytest.mark.looptime
async def test_health_says_who_leads_and_fails_a_leader_that_should_have_exited() -> None:
    store, health = Store(), Health()
    assert health.report() == (True, {"experiments": 0, "leading": True})  # no election
    a = elector(store, "a")
    health.elector = a
    healthy, said = health.report()
    assert healthy and not said["leading"] and said["leader"] == ""  # a standby is healthy
    await a.acquire()
    healthy, said = health.report()
    assert healthy and said["leading"] and said["leader"] == said["identity"] == "a"
    # No renewal for a whole lease duration (its renew loop wedged, or it did not exit).
    await asyncio.sleep(TIMING.lease_duration + 0.1)
    healthy, said = health.report()
    assert not healthy and not said["leading"]


@pytest.mark.parametrize(
    ("timing", "message"),
    [
        (Timing(10, 10, 2), "the lease duration (10s) must be greater than the renew deadline"),
        (Timing(15, 2.4, 2), "the renew deadline (2.4s) must be greater than 1.2 x the retry"),
        (Timing(15, 10, 0), "the retry period must be greater than 0"),
    ],
)
def test_timings_client_go_would_refuse_are_refused(timing: Timing, message: str) -> None:
    assert any(message in p for p in timing.problems())
    with pytest.raises(ValueError, match=re.escape(message.split(" (", maxsplit=1)[0])):
        LeaderElector(MemoryLock(Store(), "a"), timing)


def test_the_settings_name_the_variable_and_the_rule() -> None:
    cfg = load({"AGENTRL_LEADER_ELECTION": "true", "AGENTRL_LEASE_NAMESPACE": "ops",
                "AGENTRL_LEASE_NAME": "agentrl", "AGENTRL_LEASE_DURATION_SECONDS": "20",
                "AGENTRL_RENEW_DEADLINE_SECONDS": "12.5",
                "AGENTRL_RETRY_PERIOD_SECONDS": "3"})  # fmt: skip
    assert cfg.leader_election and (cfg.lease_namespace, cfg.lease_name) == ("ops", "agentrl")
    assert cfg.lease_timing == Timing(20, 12.5, 3)
    assert not load({}).leader_election and load({}).lease_timing == TIMING
    for env, message in (
        ({"AGENTRL_LEADER_ELECTION": "maybe"}, "AGENTRL_LEADER_ELECTION='maybe': write true or"),
        ({"AGENTRL_LEASE_DURATION_SECONDS": "7.5"}, "AGENTRL_LEASE_DURATION_SECONDS='7.5': whole"),
        ({"AGENTRL_LEASE_DURATION_SECONDS": "8"}, "the lease duration (8s) must be greater than"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            load(env)


class FakeKube:
    """Kube's get/create/replace over one stored Lease, with resourceVersion preconditions."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.puts: list[str] = []  # the resourceVersion each PUT carried
        self.unauthorized = 0  # answer this many requests with 401

    def _check(self) -> None:
        if self.unauthorized:
            self.unauthorized -= 1
            raise KubeError(401, "GET", "/leases/x", '{"reason":"Unauthorized"}')

    async def get(self, api: str, kind: str, ns: str | None, name: str) -> dict[str, Any] | None:
        assert (api, kind, ns, name) == ("coordination.k8s.io/v1", "Lease", "ops", "agentrl")
        self._check()
        return None if self.lease is None else {**self.lease}

    async def create(self, obj: dict[str, Any]) -> tuple[dict[str, Any] | None, Any]:
        self._check()
        if self.lease is not None:
            return None, self.lease
        self.lease = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "1"}}
        return {**self.lease}, None

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._check()
        assert self.lease is not None
        sent = obj["metadata"]["resourceVersion"]
        self.puts.append(sent)
        if sent != self.lease["metadata"]["resourceVersion"]:
            raise KubeError(409, "PUT", "/leases/agentrl", CONFLICT)
        rv = str(int(sent) + 1)
        self.lease = {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv}}
        return {**self.lease}


async def test_the_lease_lock_writes_conditional_on_what_it_read() -> None:
    kube, relogins = FakeKube(), []

    async def relogin() -> None:
        relogins.append(1)

    lock = LeaseLock(kube, "ops", "agentrl", "a", relogin)  # type: ignore[arg-type]
    assert await lock.get() is None
    assert await lock.create(Record("a", 15, "t0", "t0", 0))
    await lock.update(Record("a", 15, "t0", "t1", 0))
    assert kube.puts == ["1"]
    assert kube.lease is not None and kube.lease["spec"]["renewTime"] == "t1"
    other = LeaseLock(kube, "ops", "agentrl", "b")  # type: ignore[arg-type]
    assert not await other.create(Record("b", 15, "t", "t", 0))  # a created it first
    assert (await other.get()) == Record("a", 15, "t0", "t1", 0)
    await lock.update(Record("a", 15, "t0", "t2", 0))
    with pytest.raises(KubeError) as stale:  # b's copy predates a's renewal
        await other.update(Record("b", 15, "t3", "t3", 1))
    assert stale.value.status == 409 and kube.puts == ["1", "2", "2"]
    kube.unauthorized = 1  # a rotated token: log in again, the next attempt goes through
    with pytest.raises(KubeError):
        await lock.get()
    assert relogins == [1] and await lock.get() == Record("a", 15, "t0", "t2", 0)


async def test_a_fenced_client_sends_no_write_once_the_fence_closes() -> None:
    leading = [True]
    kube = Kube(fence=lambda: leading[0])
    # Nothing listens on port 1: a request that is sent fails to connect.
    await kube.configure(Credentials(server="http://127.0.0.1:1"))
    try:
        with pytest.raises(aiohttp.ClientConnectionError):
            await kube.patch("v1", "Pod", "ns", "p", {})
        leading[0] = False
        with pytest.raises(NotLeading, match="PATCH /api/v1/namespaces/ns/pods/p not sent"):
            await kube.patch("v1", "Pod", "ns", "p", {})
        with pytest.raises(NotLeading):
            await kube.post_event({"metadata": {"namespace": "ns"}})
        with pytest.raises(aiohttp.ClientConnectionError):  # reads are not fenced
            await kube.get("v1", "Pod", "ns", "p")
    finally:
        await kube.close()
