"""The string formats of the API: Kubernetes names, label values, paths and URLs.

Each format is a pattern and a length that both pydantic and the API server check (the
pattern goes into the CRD, so Go's RE2 and pydantic's regex engine must read it the same:
plain classes and repetitions only), plus the words a user sees when a value does not match.
What Kubernetes refuses when it creates a child object (a ServiceAccount name with an
underscore, a Kueue queue name with spaces) is refused here, when the experiment is created.
The definitions follow apimachinery's validation (k8s.io/apimachinery/pkg/util/validation).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Annotated, Final

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError

# ---- Kubernetes names ---------------------------------------------------------------

# RFC 1123 subdomain: most object names (ConfigMaps, Secrets, PVCs, ServiceAccounts,
# PriorityClasses).
DNS1123_SUBDOMAIN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_SUBDOMAIN_MAX: Final = 253
# RFC 1123 label: volume names, namespaces.
DNS1123_LABEL: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_LABEL_MAX: Final = 63
# RFC 1035 label: Service and RayJob names (must start with a letter).
DNS1035_LABEL: Final = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# A label value (may be empty).
LABEL_VALUE: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_MAX: Final = 63
# A label or annotation key: an optional DNS subdomain prefix and a name of at most 63.
QUALIFIED_NAME: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
QUALIFIED_NAME_MAX: Final = 253 + 1 + 63
QUALIFIED_NAME_PART_MAX: Final = 63  # the name after the prefix
# A key of a ConfigMap or Secret.
CONFIG_KEY: Final = r"^[-._a-zA-Z0-9]+$"
# An extended resource (`nvidia.com/gpu`): a domain-prefixed name. cpu, memory,
# ephemeral-storage and hugepages-* have no domain, so they never match.
EXTENDED_RESOURCE: Final = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
# A Kueue LocalQueue name is an object name (DNS subdomain) that also travels as a label value.
QUEUE_NAME: Final = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"

# ---- paths and URLs -----------------------------------------------------------------

# A path inside the pods; control characters are refused by every string's check.
ABSOLUTE_PATH: Final = r"^/"
PATH_MAX: Final = 4096
# http(s) with a host: no user:password@ (secrets go through Secrets), no spaces.
HTTP_URL: Final = r"^https?://[^/?#@\s]+([/?#][^\s]*)?$"
# A base URL agentrl appends paths to (`<url>/<session id>`, `<publicUrl>/sessions/...`): an
# HTTP_URL without a query or fragment, which would swallow the appended path, and which is
# where function keys and signed tokens travel (`?code=`, `?sig=`), in plain text.
HTTP_BASE_URL: Final = r"^https?://[^/?#@\s]+(/[^?#\s]*)?$"
URL_MAX: Final = 2048
# A container image reference (the distribution/reference grammar): [domain[:port]/]path
# [:tag][@digest]. The kubelet refuses anything else at pull time (InvalidImageName), after
# the pods were scheduled.
_DOMAIN_PART = r"([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PATH_PART = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
IMAGE_REF: Final = (
    # A first component is a registry only with a dot, a port or as localhost (as the
    # kubelet's ParseNormalizedNamed decides); otherwise it is a lower-case path component.
    rf"^((localhost(:[0-9]+)?|{_DOMAIN_PART}(\.{_DOMAIN_PART})+(:[0-9]+)?|{_DOMAIN_PART}:[0-9]+)/)?"
    rf"{_PATH_PART}(/{_PATH_PART})*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)
# A single token of a command line or a name that a program reads (parsers, families).
WORD: Final = r"^[A-Za-z0-9._-]+$"
WORD_MAX: Final = 128
# Free text the API passes on (env values, extraArgs, model ids): bounded so one field cannot
# fill the 1.5 MiB an object may hold.
TEXT_MAX: Final = 32 * 1024


@dataclass(frozen=True)
class Format:
    """What a user reads when a value does not match `pattern`, and the format's name in
    docs/api.md."""

    message: str
    hint: str
    label: str


FORMATS: Final[dict[str, Format]] = {
    DNS1123_SUBDOMAIN: Format(
        "not a valid Kubernetes object name (RFC 1123 subdomain)",
        "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit",
        "object name (RFC 1123 subdomain)",
    ),
    DNS1123_LABEL: Format(
        "not a valid Kubernetes name (RFC 1123 label)",
        "at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit",
        "RFC 1123 label",
    ),
    DNS1035_LABEL: Format(
        "not a valid RFC 1035 label",
        "lower-case letters, digits and '-', starting with a letter",
        "RFC 1035 label",
    ),
    LABEL_VALUE: Format(
        "not a valid Kubernetes label value",
        "at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit",
        "label value",
    ),
    QUALIFIED_NAME: Format(
        "not a valid Kubernetes label or annotation key",
        "an optional DNS prefix and '/', then letters, digits, '-', '_' and '.', e.g. "
        "example.com/team",
        "label key",
    ),
    CONFIG_KEY: Format("not a valid Secret key", "letters, digits, '-', '_' and '.'", "Secret key"),
    EXTENDED_RESOURCE: Format(
        "not an extended resource name",
        "a domain-prefixed device resource such as nvidia.com/gpu or amd.com/gpu; cpu and "
        "memory are set by their own fields",
        "extended resource name",
    ),
    QUEUE_NAME: Format(
        "not a valid Kueue queue name (it travels as a label value)",
        "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit",
        "queue name, label value",
    ),
    ABSOLUTE_PATH: Format(
        "not an absolute path",
        "give the absolute path inside the pods, e.g. /models/qwen (see runtime.volumeMounts)",
        "absolute path",
    ),
    HTTP_URL: Format(
        "not an http(s) URL with a host",
        "e.g. https://agents.example.com:8443/path; no user:password@ (use a Secret header)",
        "http(s) URL",
    ),
    HTTP_BASE_URL: Format(
        "not an http(s) URL with a host and no query or fragment, nor user:password@",
        "e.g. https://agents.example.com:8443/path; agentrl appends paths to it (<url>/<session "
        "id>), which a ?query would swallow, and a key or a user:password@ there sits in plain "
        "text in the runtime-config ConfigMap: send the agent's keys in agent.http.headers, "
        "from a Secret",
        "http(s) URL, no query",
    ),
    WORD: Format("not a single word", "letters, digits, '.', '_' and '-'", "one word"),
    IMAGE_REF: Format(
        "not a container image reference",
        "[registry[:port]/]repository[:tag][@sha256:digest], repository in lower case",
        "image reference",
    ),
}


def text_format(pattern: str) -> Format | None:
    return FORMATS.get(pattern)


# ---- checks beyond a pattern ------------------------------------------------------------

# Characters that make text read differently from what runs: NUL ends C strings in the
# container runtime; bidirectional overrides reorder what a reviewer sees (Trojan Source).
_HIDDEN = re.compile("[\x00\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def hidden_character(value: str) -> str | None:
    """A description of the first NUL or bidi control in `value`, else None."""
    found = _HIDDEN.search(value)
    if found is None:
        return None
    char = found.group()
    name = "NUL" if char == "\x00" else "a bidirectional control"
    return f"{name} character (U+{ord(char):04X}) at offset {found.start()}"


def _path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path")
    if _CONTROL.search(value):
        raise ValueError("a path must not contain control characters")
    return value


def _url(value: str) -> str:
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("credentials in a URL (user:password@) would be stored in plain text")
    try:
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        raise ValueError(f"{value!r} has an invalid port") from None
    return value


AbsolutePath = Annotated[
    str, Field(min_length=1, max_length=PATH_MAX, pattern=ABSOLUTE_PATH), AfterValidator(_path)
]
HttpUrl = Annotated[
    str, Field(min_length=1, max_length=URL_MAX, pattern=HTTP_URL), AfterValidator(_url)
]
HttpBaseUrl = Annotated[
    str, Field(min_length=1, max_length=URL_MAX, pattern=HTTP_BASE_URL), AfterValidator(_url)
]
ObjectName = Annotated[
    str, Field(min_length=1, max_length=DNS1123_SUBDOMAIN_MAX, pattern=DNS1123_SUBDOMAIN)
]
LabelValue = Annotated[str, Field(max_length=LABEL_VALUE_MAX, pattern=LABEL_VALUE)]
QualifiedName = Annotated[
    str, Field(min_length=1, max_length=QUALIFIED_NAME_MAX, pattern=QUALIFIED_NAME)
]
ExtendedResource = Annotated[
    str, Field(min_length=1, max_length=QUALIFIED_NAME_MAX, pattern=EXTENDED_RESOURCE)
]
Word = Annotated[str, Field(min_length=1, max_length=WORD_MAX, pattern=WORD)]
Text = Annotated[str, Field(max_length=TEXT_MAX)]


def base_url_problem(value: str) -> str | None:
    """What is wrong with `value` as a base URL (`HttpBaseUrl`), in the words validation uses
    for a spec field of that kind (`agent.http.url`, `gateway.publicUrl`); None if nothing.
    For command-line options that stand in for such a field (`agentrl rehearse --agent-url`,
    `--gateway-url`)."""
    try:
        TypeAdapter(HttpBaseUrl).validate_python(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        fmt = text_format(str((error.get("ctx") or {}).get("pattern")))
        if error["type"] == "string_pattern_mismatch" and fmt is not None:
            return f"{fmt.message} ({fmt.hint})"
        return str(error["msg"]).removeprefix("Value error, ")
    return None
