"""`--listen 0.0.0.0`: agents on other machines are handed this machine's address.

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


def own_addresses() -> set[str]:
    """This machine's IPv4 addresses other than loopback, from its interfaces."""
    return {
        a.address
        for nic in psutil.net_if_addrs().values()
        for a in nic
        if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback
    }


@pytest.mark.parametrize("listen", ["0.0.0.0", "::"])
@pytest.mark.parametrize("hosts_entry", [None, "127.0.1.1", "127.0.0.1"])
def test_agents_are_handed_an_address_of_this_machine_not_its_loopback(
    monkeypatch: pytest.MonkeyPatch, listen: str, hosts_entry: str | None
) -> None:
    if not own_addresses():
        pytest.skip("this machine has no address but loopback")
    if hosts_entry is not None:  # the host name as /etc/hosts resolves it on many machines
        monkeypatch.setattr(socket, "gethostbyname", lambda _: hosts_entry)
        monkeypatch.setattr(socket, "gethostbyname_ex", lambda n: (n, [], [hosts_entry]))
    assert run._advertised(listen) in own_addresses()


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
    with pytest.raises(RehearsalError, match="pass --gateway-url"):
        run._advertised("0.0.0.0")
