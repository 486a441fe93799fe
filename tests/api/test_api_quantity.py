"""parse_quantity reads resource quantities the way apimachinery does."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agentrl.api.quantity import parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("64Gi", 64 * 2**30),
        ("500m", Decimal("0.5")),
        ("8", 8),
        ("1.5G", 1_500_000_000),
        ("0.5Ki", 512),
        ("1e3", 1000),
        ("+3M", 3_000_000),
        (".5", Decimal("0.5")),
    ],
)
def test_values(text: str, value: Decimal | int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["lots", "5Kii", "1.2.3", "64 Gi", "", "Gi"])
def test_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(text)
