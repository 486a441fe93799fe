"""YAML values as `kubectl apply -f` sends them, not as PyYAML reads them.

kubectl turns each YAML document into JSON with sigs.k8s.io/yaml's `YAMLToJSON`: go-yaml v2
decodes it into Go values, non-string map keys become strings, and Go's `encoding/json`
writes the result; kubectl then decodes that JSON into an object whose numbers are int64
when the text is an integer and float64 otherwise, and sends it. PyYAML implements YAML 1.1
too, but reads many plain scalars differently, so a file could mean one thing to
`agentrl validate` and another to the cluster:

| written       | PyYAML                    | kubectl (go-yaml v2 + JSON)       |
| ------------- | ------------------------- | --------------------------------- |
| `1e-6`        | the string "1e-6"         | the number 1e-06                  |
| `y`, `n`      | strings                   | true, false                       |
| `1:30`        | 90 (base 60)              | the string "1:30"                 |
| `2.0`         | the float 2.0             | 2 (Go writes whole floats as ints)|
| `2024-01-01`  | a date                    | the string "2024-01-01"           |
| `0o17`        | the string "0o17"         | 15                                |
| `1e400`       | the string "1e400"        | the string (out of float range)   |
| `on: x` (key) | {True: "x"}               | {"true": "x"}                     |
| `!!null x`    | None                      | an error: `x` is no null          |
| `!custom x`   | an error                  | the string "x"                    |
| `~: x` (key)  | {None: "x"}               | an error: no JSON key             |

This module builds the document from PyYAML's node graph (its scanner and composer are
libyaml's, as go-yaml's are) with go-yaml v2.4's rules: `resolve` for plain and tagged
scalars, `decoder.mapping` for merge keys (`<<` merges in document order, later keys win),
sigs.k8s.io/yaml v1.6's `convertToJSONableObject` for keys, and `encoding/json` plus
apimachinery's number decoding for what a number becomes. Sources, at the versions
kubectl 1.34 to 1.37 vendor:
https://github.com/yaml/go-yaml/blob/v2.4.2/resolve.go (and decode.go),
https://github.com/kubernetes-sigs/yaml/blob/v1.6.0/yaml.go,
https://github.com/kubernetes/apimachinery/blob/v0.34.5/pkg/util/yaml/decoder.go.

Two deliberate differences, both stricter: a key written twice in one mapping is reported
(kubectl silently keeps the last), and a non-finite number is kept so that its field is
named (kubectl stops at the whole document: "json: unsupported value: +Inf").
"""

from __future__ import annotations

import base64
import binascii
import codecs
import datetime
import decimal
import math
import re
import struct
from collections.abc import Callable
from typing import Any, Final

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agentrl.api import bounds
from agentrl.api.bounds import INT64_MAX, INT64_MIN

LONG_TAG: Final = "tag:yaml.org,2002:"
STR, BOOL, INT, FLOAT, NULL, TIMESTAMP, BINARY, MERGE = (
    LONG_TAG + t for t in ("str", "bool", "int", "float", "null", "timestamp", "binary", "merge")
)
# A plain scalar without a tag: resolved by its text (the composer marks it with this).
PLAIN: Final = "tag:agentrl.io,2025:plain"
RESOLVABLE: Final = frozenset({"", STR, BOOL, INT, FLOAT, NULL, TIMESTAMP})
UINT64_MAX: Final = 2**64 - 1

# go-yaml v2's resolveMap: text -> value, checked before any number parsing.
_WORDS: Final[dict[str, Any]] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE"), True),
    **dict.fromkeys(("on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE"), False),
    **dict.fromkeys(("off", "Off", "OFF"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
# go-yaml v2's yamlStyleFloat, applied before strconv.ParseFloat.
_YAML_FLOAT: Final = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
# strconv.ParseFloat on text that starts with '.': only a fraction and an exponent.
_DOT_FLOAT: Final = re.compile(r"^\.[0-9]+([eE][-+]?[0-9]+)?$")
_DIGITS: Final = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}
# go-yaml v2's allowedTimestampFormats, for an explicit !!timestamp tag only (a plain date
# is the same string either way: go-yaml hands timestamps to interface{} as their text).
_TIMESTAMP: Final = re.compile(
    r"^(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:(?:[Tt](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2}))"
    r"|(?: (\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d{1,9})?))?$"
)
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


class KubeYamlError(ValueError):
    """A document kubectl would refuse to convert; `path` is the wire path of the value."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def _go_replace(error: UnicodeError) -> tuple[str, int]:
    # encoding/json writes each invalid byte as U+FFFD (Python's "replace" merges some).
    assert isinstance(error, UnicodeDecodeError)
    return "\ufffd", error.start + 1


codecs.register_error("agentrl-go-replace", _go_replace)


def go_string(data: bytes | str) -> str:
    """What encoding/json writes for a Go string: invalid UTF-8 (and, from an escape,
    a lone surrogate) as U+FFFD."""
    if isinstance(data, bytes):
        return data.decode("utf-8", "agentrl-go-replace")
    return data if data.isascii() else _SURROGATE.sub("\ufffd", data)


def _parse_int(text: str, signed: bool = True) -> int | None:
    """strconv.ParseInt(text, 0, 64) (ParseUint when not `signed`), or None on an error."""
    sign, body = 1, text
    if signed and body[:1] in ("+", "-"):
        sign, body = (-1 if body[0] == "-" else 1), body[1:]
    prefix = body[:2].lower()
    base = {"0x": 16, "0o": 8, "0b": 2}.get(prefix)
    if base is not None:
        body = body[2:]
    elif len(body) > 1 and body[0] == "0":
        base, body = 8, body[1:]
    else:
        base = 10
    if not body or any(c not in _DIGITS[base] for c in body) or len(body.lstrip("0")) > 70:
        return None  # (70 significant digits overflow 64 bits in any base)
    value = sign * int(body, base)
    low, high = (INT64_MIN, INT64_MAX) if signed else (0, UINT64_MAX)
    return value if low <= value <= high else None


def _parse_float(text: str) -> float | None:
    """strconv.ParseFloat(text, 64) for text already in YAML float syntax; None when it is
    out of range (Go returns ErrRange; underflow is 0 without an error, as here)."""
    value = float(text)
    return None if math.isinf(value) else value


def _timestamp(text: str) -> bool:
    match = _TIMESTAMP.match(text)
    if match is None:
        return False
    year, month, day = (int(g) for g in match.groups()[:3])
    clock = [int(g) for g in match.groups()[3:] if g is not None]
    try:
        datetime.date(year, month, day)
    except ValueError:
        return False
    return not clock or (clock[0] < 24 and clock[1] < 60 and clock[2] < 60)


def resolve(tag: str, text: str) -> tuple[str, Any]:
    """go-yaml v2's `resolve`: the tag a scalar resolves to and its Go value (str, bool,
    int, float or None). Raises ValueError where go-yaml would fail the document."""
    if tag not in RESOLVABLE:
        return tag, text
    rtag, value = _resolve(tag, text)
    if tag in ("", rtag, STR, BINARY):
        return rtag, value
    if tag == FLOAT and rtag == INT:
        return FLOAT, float(value)
    raise ValueError(f"cannot decode {_short(rtag)} `{text}` as a {_short(tag)}")


def _resolve(tag: str, text: str) -> tuple[str, Any]:
    hint = _hint(text)
    if hint is None or tag == STR:
        return STR, text
    if text in _WORDS:
        value = _WORDS[text]
        return (BOOL if isinstance(value, bool) else NULL if value is None else FLOAT), value
    if hint == "." and _DOT_FLOAT.match(text):
        number = _parse_float(text)
        if number is not None:
            return FLOAT, number
    elif hint == "D":
        if tag in ("", TIMESTAMP) and _timestamp(text):
            return TIMESTAMP, text
        plain = text.replace("_", "")
        for signed in (True, False):
            whole = _parse_int(plain, signed)
            if whole is not None:
                return INT, whole
        # (go-yaml's own 0b/-0b branch that follows is unreachable since Go 1.13, whose
        # ParseInt reads those prefixes itself.)
        if _YAML_FLOAT.match(plain):
            number = _parse_float(plain)
            if number is not None:
                return FLOAT, number
    return STR, text


def _hint(text: str) -> str | None:
    """go-yaml's resolveTable: which parse a scalar's first character allows (None: it is
    text whatever follows)."""
    if not text:
        return "M"
    first = text[0]
    if first in "+-0123456789":
        return "D"
    if first == ".":
        return "."
    return "M" if first in "yYnNtTfFoO~" else None


def _short(tag: str) -> str:
    return "!!" + tag[len(LONG_TAG) :] if tag.startswith(LONG_TAG) else tag


def json_number(value: int | float) -> int | float:
    """A Go number as it reaches the API server: encoding/json writes whole floats below
    1e21 as integers (in their shortest digits), and kubectl decodes each number again as an
    int64, or else a float64, before sending it; Python reads integer text as an int."""
    if isinstance(value, int) and INT64_MIN <= value <= INT64_MAX:
        return value
    number = float(value)
    if math.isfinite(number) and number.is_integer() and abs(number) < 1e21:
        return int(decimal.Decimal(repr(number)))  # Go's digits: 18446744073709552000
    return number


def map_key(value: Any, path: str) -> str:
    """sigs.k8s.io/yaml's conversion of a decoded key to a JSON object key."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value <= INT64_MAX:
        return str(value)
    if isinstance(value, float):
        return _float32_g(value)
    kind = "null" if value is None else "uint64" if isinstance(value, int) else type(value).__name__
    raise KubeYamlError(path, f"a {kind} map key has no JSON form")


def _float32_g(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32), with go-yaml's names for the non-finite."""
    if math.isnan(value):
        return ".nan"
    try:
        single = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        single = math.copysign(math.inf, value)
    if math.isinf(single):
        return ".inf" if single > 0 else "-.inf"
    if single == 0:
        return "-0" if math.copysign(1, single) < 0 else "0"
    for precision in range(9):  # the shortest text that reads back as the same float32
        text = f"{abs(single):.{precision}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == abs(single):
            break
    mantissa, exponent_text = text.split("e")
    digits, exponent = mantissa.replace(".", ""), int(exponent_text)
    sign = "-" if single < 0 else ""
    if exponent < -4 or exponent >= 6:  # Go's %e threshold for the shortest 'g'
        fraction = f".{digits[1:]}" if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{fraction}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    whole, fraction = digits[: exponent + 1].ljust(exponent + 1, "0"), digits[exponent + 1 :]
    return f"{sign}{whole}" + (f".{fraction}" if fraction else "")


# ---- the document -------------------------------------------------------------------


OnDuplicate = Callable[[str], None]


def build(node: Node | None, on_duplicate: OnDuplicate) -> Any:
    """The JSON value kubectl sends for a composed document. `on_duplicate(path)` is told of
    every key written twice in one mapping (kubectl keeps the last silently)."""
    return None if node is None else _Builder(on_duplicate).value(node, "")


class _Builder:
    def __init__(self, on_duplicate: OnDuplicate) -> None:
        self.on_duplicate = on_duplicate

    def value(self, node: Node, path: str) -> Any:
        """A node's JSON value; tags on lists and mappings are ignored, as go-yaml does."""
        if isinstance(node, ScalarNode):
            value = self.go_value(node, path)
            return value if isinstance(value, str | bool) or value is None else json_number(value)
        if isinstance(node, SequenceNode):
            return [self.value(item, bounds.join(path, i)) for i, item in enumerate(node.value)]
        assert isinstance(node, MappingNode)  # the composer makes only these three
        out: dict[str, Any] = {}
        self.mapping(node, path, out, explicit=True)
        return out

    def go_value(self, node: ScalarNode, path: str) -> Any:
        """The scalar as go-yaml decodes it into interface{} (before JSON)."""
        tag = "" if node.tag == PLAIN else node.tag
        try:
            rtag, value = resolve(tag, node.value)
            if rtag == BINARY:
                data = base64.b64decode(re.sub("[\r\n]", "", node.value), validate=True)
                return go_string(data)
        except binascii.Error:
            raise KubeYamlError(path, "!!binary value contains invalid base64 data") from None
        except ValueError as exc:
            raise KubeYamlError(path, str(exc)) from None
        return go_string(value) if isinstance(value, str) else value

    def mapping(self, node: MappingNode, path: str, out: dict[str, Any], explicit: bool) -> None:
        """go-yaml's decoder.mapping: keys in document order, and a merge (`<<`) copies its
        mappings in place, so a later key overrides a merged one and vice versa."""
        written: set[str] = set()
        for key_node, value_node in node.value:
            if _is_merge(key_node):
                self.merge(value_node, path, out)
                continue
            if not isinstance(key_node, ScalarNode):
                raise KubeYamlError(path, "a map key is a list or a mapping; JSON keys are text")
            raw = bounds.join(path, key_node.value)
            key = map_key(self.go_value(key_node, raw), raw)
            where = bounds.join(path, key)
            value = self.value(value_node, where)
            if explicit and key in written:
                self.on_duplicate(where)
            written.add(key)
            out[key] = value

    def merge(self, node: Node, path: str, out: dict[str, Any]) -> None:
        parts = node.value[::-1] if isinstance(node, SequenceNode) else [node]
        for part in parts:  # a list merges backwards: earlier mappings take precedence
            if not isinstance(part, MappingNode):
                raise KubeYamlError(
                    bounds.join(path, "<<"),
                    "map merge requires map or sequence of maps as the value",
                )
            self.mapping(part, path, out, explicit=False)


def _is_merge(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.value == "<<" and node.tag in (PLAIN, MERGE)
