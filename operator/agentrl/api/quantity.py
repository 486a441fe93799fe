"""Kubernetes resource quantities ("64Gi", "500m", "1e3"): the grammar, and the value in base
units (bytes, cores) for comparisons.

The grammar is apimachinery's `resource.Quantity` (k8s.io/apimachinery/pkg/api/resource,
`parseQuantityString`): a decimal number, then a binary suffix (Ki..Ei), a decimal suffix
(n, u, m, "", k, M, G, T, P, E) or a *whole* decimal exponent (`e3`, `E-2`). controller-gen's
CRD pattern for Quantity admits a fractional exponent (`1e2.5`) that apimachinery then
refuses, so ours is the stricter one. Quantities in an experiment are resource sizes, so they
are never negative, and they must fit the 64-bit integers the scheduler and the kubelet count
in; anything else is refused here, before a Pod is refused hours later.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Final

# No sign: every quantity of an experiment is a size. Exponents are whole numbers.
QUANTITY_PATTERN: Final = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][-+]?[0-9]+))?$"
)
# Longer text is never a size anyone means; the bound also keeps the arithmetic small.
QUANTITY_MAX_LENGTH: Final = 64
# Kubernetes counts resources in int64 (Quantity.Value(), MilliValue() for CPU); beyond this a
# value saturates and no node can ever fit it.
QUANTITY_MAX: Final = Decimal(2**63 - 1)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
            "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18)}  # fmt: skip
_SHAPE = re.compile(
    r"^(?P<sign>[-+]?)(?P<number>([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(?P<suffix>[A-Za-z].*)?$"
)
# An exponent this large cannot be a size below QUANTITY_MAX (a number has at most 64 digits).
_EXPONENT_MAX = 100


def parse_quantity(text: str) -> Decimal:
    """'64Gi' -> 68719476736; raises ValueError saying what is wrong with the text.

    Only sizes are accepted: not negative, at most QUANTITY_MAX base units.
    """
    if len(text) > QUANTITY_MAX_LENGTH:
        raise ValueError(f"not a Kubernetes quantity (over {QUANTITY_MAX_LENGTH} characters)")
    match = _SHAPE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    if match["sign"] == "-":
        raise ValueError(f"{text!r} is negative; a resource size is 0 or more")
    suffix = match["suffix"] or ""
    value = Decimal(match["number"])
    if suffix in _BINARY:
        value *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    elif suffix[:1] in ("e", "E"):
        value *= _exponent(text, suffix[1:])
    else:
        raise ValueError(
            f"{text!r} is not a Kubernetes quantity (unknown suffix {suffix!r}; "
            "use Ki, Mi, Gi, Ti, m, k, M, G or a whole exponent like e3)"
        )
    if value > QUANTITY_MAX:
        raise ValueError(f"{text!r} is larger than Kubernetes can count (2^63-1)")
    return value


def _exponent(text: str, digits: str) -> Decimal:
    if not re.fullmatch(r"[-+]?[0-9]+", digits):
        raise ValueError(f"{text!r}: the exponent must be a whole number (e.g. 1e3)")
    if abs(int(digits)) > _EXPONENT_MAX:
        raise ValueError(f"{text!r}: exponent out of range")
    try:
        return Decimal(10) ** int(digits)
    except InvalidOperation as exc:  # pragma: no cover - bounded above
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from exc
