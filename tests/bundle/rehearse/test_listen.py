"""`--listen 0.0.0.0` (or `::`): agents on other machines are handed this machine's address.

docs/rehearse.md promises it; the address came from the host name, which /etc/hosts often
maps to loopback (Debian's 127.0.1.1, and this test machine's 127.0.0.1), so an agent
elsewhere was handed its own loopback and reached nothing.
"""

from __future__ import annotations

import ipaddress
import socket

import psutil
import pytest

from agentrl.bundle.rehearse import run
from agentrl.bundle.rehearse.report import RehearsalError


def own_addresses(family: socket.AddressFamily = socket.AF_INET) -> set[str]:
    """This machine's addresses of `family` other than loopback and link-local, from its
    interfaces."""
    found = set()
    for nic in psutil.net_if_addrs().values():
        for a in nic:
            if a.family != family:
                continue
            ip = ipaddress.ip_address(a.address.split("%")[0])
            if not (ip.is_loopback or ip.is_link_local):
                found.add(str(ip))
    return found


@pytest.mark.parametrize("listen", ["0.0.0.0", "::"])
@pytest.mark.parametrize("hosts_entry", [None, "127.0.1.1", "127.0.0.1"])
def test_agents_are_handed_an_address_of_this_machine_not_its_loopback(
    monkeypatch: pytest.MonkeyPatch, listen: str, hosts_entry: str | None
) -> None:
    # aiohttp binds "::" to IPv6 alone (asyncio sets IPV6_V6ONLY): its agents need an IPv6
    # address, "0.0.0.0"'s an IPv4 one.
    family = socket.AF_INET6 if listen == "::" else socket.AF_INET
    if not own_addresses(family):
        pytest.skip(f"this machine has no {family.name} address but loopback")
    if hosts_entry is not None:  # the host name as /etc/hosts resolves it on many machines
        monkeypatch.setattr(socket, "gethostbyname", lambda _: hosts_entry)
        monkeypatch.setattr(socket, "gethostbyname_ex", lambda n: (n, [], [hosts_entry]))
    assert run._advertised(listen) in own_addresses(family)


def test_a_named_listen_address_is_handed_out_as_it_is() -> None:
    assert run._advertised("10.1.2.3") == "10.1.2.3"


def test_a_machine_with_loopback_alone_is_told_to_pass_the_gateway_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class NoRoute(socket.socket):
        def connect(self, address: object) -> None:
            raise OSError("Network is unreachable")

    monkeypatch.setattr(socket, "socket", NoRoute)
    monkeypatch.setattr(socket, "gethostbyname", lambda _: "127.0.1.1")
    monkeypatch.setattr(socket, "gethostbyname_ex", lambda n: (n, [], ["127.0.1.1"]))
    monkeypatch.setattr(socket, "getaddrinfo", lambda *_: [
        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 0, 0, 0)),
        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fe80::1%eth0", 0, 0, 2)),
    ])  # fmt: skip
    for listen in ("0.0.0.0", "::", ""):
        with pytest.raises(RehearsalError, match="pass --gateway-url"):
            run._advertised(listen)
