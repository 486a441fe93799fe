"""Kubernetes resource quantities ("64Gi", "500m", "1e3") as numbers, for comparisons.

Only what validation needs: the value in base units (bytes, cores), exactly as
apimachinery's `resource.Quantity` reads the same text.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from agentrl.api.base import QUANTITY_PATTERN

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
            "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18)}  # fmt: skip
_QUANTITY = re.compile(QUANTITY_PATTERN)


def parse_quantity(text: str) -> Decimal:
    """'64Gi' -> 68719476736; raises ValueError on text Kubernetes would refuse."""
    match = _QUANTITY.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    number = (match.group(1) or "") + match.group(2)
    suffix = match.group(6) or ""
    try:
        value = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only numbers
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from exc
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        return value * Decimal(10) ** int(suffix[1:])
    return value * _DECIMAL[suffix]
