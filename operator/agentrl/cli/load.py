"""Read RLExperiment documents the way `kubectl apply -f` reads manifests, within bounds.

`-f` takes files, directories (their .yaml, .yml and .json files in name order; with
`--recursive` their subdirectories too) and `-` for stdin, each holding one or more YAML
documents; a `kind: List` is read as its items. Documents of other kinds (a Secret or a PVC
next to the experiment) are skipped with a note, as they are not this tool's to check.

Values are read as kubectl sends them (`agentrl.cli.kubeyaml`: go-yaml v2's `1e-6` is a
number, `y` a boolean, `1:30` a string), not as PyYAML would. YAML is parsed with a composer
that enforces the limits of `agentrl.api.bounds` while it builds the document, so nesting
20,000 levels deep or an alias bomb stops at the first value past a limit, with that value's
field path, instead of exhausting the stack, the CPU or the memory. Each violation is
reported with the document it belongs to; a problem with the file itself (missing,
unreadable, empty, not UTF-8) is a LoadError.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from yaml.events import AliasEvent
from yaml.nodes import Node, ScalarNode

from agentrl.api import bounds
from agentrl.api.constants import API_VERSION, GROUP, KIND
from agentrl.api.validation import Problem
from agentrl.cli import kubeyaml

# What kubectl reads from a directory (kubectl's FileExtensions).
EXTENSIONS: Final = (".json", ".yaml", ".yml")
# One file can hold many documents; each still has to fit one object (agentrl.api.bounds).
MAX_FILE_BYTES: Final = 16 * 1024 * 1024


class LoadError(Exception):
    """An input cannot be read as YAML/JSON documents at all: `source` names it as every
    message does (`stdin` for `-`), `reason` says why."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source, self.reason = source, reason


@dataclass(frozen=True)
class Document:
    """One document of the input: where it came from, and its content or why it has none."""

    source: str  # "spec.yaml", or "all.yaml#2" for the second document of a file
    body: Any = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", KIND)) if isinstance(self.body, dict) else KIND

    @property
    def is_experiment(self) -> bool:
        """Ours to check: kind RLExperiment or no kind at all (refused then, for the kind
        kubectl needs: `unset_type`), our API group, or a kind one typo away from ours
        (refused then, not skipped)."""
        if self.kind == KIND or self.problems:
            return True
        api_version = self.body.get("apiVersion") if isinstance(self.body, dict) else None
        if isinstance(api_version, str) and api_version.split("/")[0] == GROUP:
            return True
        return difflib.SequenceMatcher(None, self.kind.lower(), KIND.lower()).ratio() > 0.8

    def describe(self) -> str:
        """'v1/Secret hf-token', for the note that says a document was skipped."""
        body = self.body if isinstance(self.body, dict) else {}
        meta = body.get("metadata")
        name = meta.get("name", "") if isinstance(meta, dict) else ""
        return f"{body.get('apiVersion', '')}/{self.kind} {name}".strip()


def unset_type(body: Any) -> list[Problem]:
    """`apiVersion` and `kind` that a manifest leaves out. The models default both, as the
    operator reads objects the API server stored with them; kubectl apply refuses a
    document without them ("apiVersion not set, kind not set"), so `validate` must too."""
    if not isinstance(body, dict):
        return []  # the models say what a non-object is
    hint = f"start the document with apiVersion: {API_VERSION} and kind: {KIND}"
    return [
        Problem(key, "not set: kubectl apply refuses a document without it", hint)
        for key in ("apiVersion", "kind")
        if body.get(key) in (None, "")
    ]


def load_documents(paths: Sequence[str], recursive: bool = False) -> list[Document]:
    """Every document under `paths`, in order; raises LoadError for an unreadable input."""
    docs: list[Document] = []
    for path in paths:
        for file in _expand(path, recursive):
            docs.extend(_documents(file, _read(file)))
    return docs


def load_document(path: str) -> Any:
    """The one document in `path` (a policy or chart values file), within the same bounds."""
    docs = load_documents([path])
    if len(docs) != 1:
        raise LoadError(input_name(path), f"holds {len(docs)} documents; expected one")
    (doc,) = docs
    if doc.problems:
        raise LoadError(doc.source, "; ".join(str(p) for p in doc.problems))
    return doc.body


def _expand(path: str, recursive: bool) -> list[str]:
    if path == "-":
        return [path]
    target = Path(path)
    if not target.exists():
        raise LoadError(path, "no such file or directory")
    if not target.is_dir():
        return [path]
    # os.walk does not follow directory symlinks, so a link loop cannot make -R spin.
    walked = os.walk(target) if recursive else [(str(target), [], os.listdir(target))]
    files = sorted(
        os.path.join(root, name)
        for root, _, names in walked
        for name in names
        if Path(name).suffix in EXTENSIONS and os.path.isfile(os.path.join(root, name))
    )
    if not files:
        raise LoadError(
            path,
            f"no {', '.join(EXTENSIONS)} files"
            + ("" if recursive else " (use --recursive for subdirectories)"),
        )
    return files


def _read(path: str) -> str:
    try:
        if path == "-":
            stream = getattr(sys.stdin, "buffer", None)  # a text-only stdin (tests, IDEs)
            data = (
                stream.read(MAX_FILE_BYTES + 1)
                if stream is not None
                else sys.stdin.read(MAX_FILE_BYTES + 1).encode("utf-8")
            )
        else:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
    except IsADirectoryError:
        raise LoadError(path, "is a directory, not a file") from None
    except OSError as exc:
        raise LoadError(input_name(path), f"cannot read: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise LoadError(input_name(path), f"larger than {MAX_FILE_BYTES // 2**20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise LoadError(input_name(path), "not UTF-8 text") from None


def _documents(path: str, text: str) -> list[Document]:
    bad = _SafeLoader.NON_PRINTABLE.search(text)
    if bad is not None:
        # YAML has no raw control characters; say which field holds one, not just where.
        return [Document(input_name(path), None, [_unprintable(text, bad.start())])]
    loader: Any = _BoundedLoader(text)
    raw: list[tuple[Any, list[Problem]]] = []
    try:
        while loader.check_data():
            body = loader.get_data()
            raw.append((body, loader.take_problems()))
    except _StopFile:
        problems = loader.take_problems()
        if "\n---" in text[loader.index :]:  # say so when documents follow unread
            hint = problems[-1].hint + "; later documents of this file were not read"
            problems[-1] = dataclasses.replace(problems[-1], hint=hint)
        raw.append((None, problems))
    except yaml.YAMLError as exc:
        # Name the field where the text stopped being YAML, as well as the line.
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = _path_at(text, mark.index) if mark is not None else ""
        hint = "check the indentation, quotes and brackets there"
        raw.append((None, [Problem(where, f"not valid YAML: {_yaml_reason(exc)}", hint)]))
    finally:
        loader.dispose()
    raw = [(b, p) for b, p in raw if b is not None or p]  # `---` with nothing after it
    if not raw:
        empty = "nothing was read" if path == "-" else "the file is empty"
        raise LoadError(input_name(path), empty)
    label = input_name(path)
    docs: list[Document] = []
    for i, (body, problems) in enumerate(raw, 1):
        source = label if len(raw) == 1 else f"{label}#{i}"
        docs.extend(_items(source, body, problems))
    return docs


def input_name(path: str) -> str:
    """How messages name an input: its path, or `stdin` for `-`."""
    return "stdin" if path == "-" else path


def _unprintable(text: str, index: int) -> Problem:
    """The field whose text holds the character at `index` (found by parsing a copy with the
    unprintable characters replaced), and what the character is."""
    char = text[index]
    what = "a NUL character" if char == "\x00" else f"the control character U+{ord(char):04X}"
    line = text.count("\n", 0, index) + 1
    clean = _SafeLoader.NON_PRINTABLE.sub("\ufffd", text)
    path = _path_at(clean, index)
    return Problem(
        path,
        f"{what} on line {line}; YAML allows none",
        'write it as an escape in a double-quoted string ("\\0") or remove it',
    )


def _path_at(text: str, index: int) -> str:
    """The wire path of the scalar that spans `index` in `text`, or of the collection being
    read there (where a syntax error stopped the parser)."""
    # Each frame: [is a mapping, key expected next, path of the collection, next index/key]
    stack: list[list[Any]] = []
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if event.start_mark is not None and event.start_mark.index > index:
                break
            if isinstance(event, yaml.DocumentStartEvent):
                stack = []
            if not isinstance(event, yaml.NodeEvent | yaml.CollectionEndEvent):
                continue
            if isinstance(event, yaml.CollectionEndEvent):
                stack.pop()
                _advance(stack)
                continue
            where = _child(stack)
            if isinstance(event, yaml.ScalarEvent):
                start, end = event.start_mark, event.end_mark
                key_position = bool(stack) and stack[-1][0] and stack[-1][1]
                if start is not None and end is not None and start.index <= index <= end.index:
                    return bounds.join(where, event.value) if key_position else where
                if key_position:
                    stack[-1][3] = event.value
                _advance(stack)
            elif isinstance(event, yaml.CollectionStartEvent):
                stack.append([isinstance(event, yaml.MappingStartEvent), True, where, 0])
            else:  # an alias
                _advance(stack)
    except yaml.YAMLError:
        pass
    if not stack:
        return ""
    is_map, key_next, path, _ = stack[-1]
    return _child(stack) if is_map and not key_next else path


def _child(stack: list[list[Any]]) -> str:
    if not stack:
        return ""
    is_map, key_next, path, slot = stack[-1]
    if is_map:
        return path if key_next else bounds.join(path, str(slot))
    return bounds.join(path, slot)


def _advance(stack: list[list[Any]]) -> None:
    if not stack:
        return
    frame = stack[-1]
    if frame[0]:
        frame[1] = not frame[1]
    else:
        frame[3] += 1


def _items(source: str, body: Any, problems: list[Problem]) -> Iterator[Document]:
    if problems:
        yield Document(source, None, problems)
        return
    violations = bounds.check_document(body)
    if violations:
        yield Document(source, None, [Problem(v.path, v.message, v.hint) for v in violations])
        return
    items = body.get("items") if isinstance(body, dict) else None
    if isinstance(body, dict) and body.get("kind") == "List" and isinstance(items, list):
        for i, item in enumerate(items):
            yield Document(f"{source}[{i}]", item)
        return
    yield Document(source, body)


class _StopFile(Exception):
    """A document broke a bound; the rest of its file is not read."""


class _OutOfBounds(Exception):
    def __init__(self, path: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.problem = Problem(path, message, hint)


# PyYAML's composer internals are untyped in its stubs; the subclass is checked as Any.
_SafeLoader: Any = yaml.SafeLoader


class _BoundedLoader(_SafeLoader):  # type: ignore[misc]
    """SafeLoader whose composer counts depth and values (aliases expanded) as it goes and
    gives up on a document at the first value past a limit of `agentrl.api.bounds`."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._problems: list[Problem] = []
        self._path: list[str | int] = []
        self._count = 0
        self._weights: dict[int, int] = {}

    def get_data(self) -> Any:
        """The next document as kubectl would send it (a plain JSON tree), or None when it
        broke a bound or kubectl could not convert it; the reason is in take_problems()."""
        if not self.check_node():
            return None
        node = self.get_node()
        if node is None:
            return None
        try:
            return kubeyaml.build(node, self._duplicate)
        except kubeyaml.KubeYamlError as exc:
            self._problems.append(
                Problem(exc.path, f"kubectl cannot convert it to JSON: {exc}", _CONVERT_HINT)
            )
            return None

    def _duplicate(self, path: str) -> None:
        """A key written twice: kubectl silently sends the last one; say so instead."""
        self._problems.append(
            Problem(
                path,
                "the key is written twice in this mapping",
                "keep one (kubectl would silently send the last)",
            )
        )

    def compose_scalar_node(self, anchor: str | None) -> Node:
        """A scalar tagged for `kubeyaml`: plain and untagged (resolved by its text), quoted
        or a block (a string), or its explicit tag. PyYAML's own resolver is not used."""
        event = self.peek_event()
        node: Node = super().compose_scalar_node(anchor)
        if event.tag == "!" or (event.tag is None and not event.implicit[0]):
            node.tag = kubeyaml.STR
        elif event.tag is None:
            node.tag = kubeyaml.PLAIN
        return node

    def take_problems(self) -> list[Problem]:
        found, self._problems = self._problems, []
        return found

    def compose_document(self) -> Node | None:
        self.get_event()  # DocumentStartEvent
        self._path, self._count, self._weights = [], 0, {}
        try:
            node = self.compose_node(None, None)
        except _OutOfBounds as exc:
            # Stop reading the file here: skipping the rest of a hostile document would cost
            # what the bound is there to avoid (PyYAML's scanner is quadratic in nesting).
            self._problems.append(exc.problem)
            raise _StopFile from None
        self.get_event()  # DocumentEndEvent
        self.anchors: dict[str, Node] = {}
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        where = self._where(index)
        if self.check_event(AliasEvent):
            alias = self.peek_event().anchor
            target = self.anchors.get(alias)
            if target is not None:
                weight = self._weights.get(id(target))
                if weight is None:
                    raise _OutOfBounds(
                        where, f"alias *{alias} refers to a collection that contains it",
                        "a recursive structure has no JSON form; remove the alias",
                    )  # fmt: skip
                self._add(weight, where)
            aliased: Node = super().compose_node(parent, index)
            return aliased
        if len(self._path) >= bounds.MAX_DEPTH:
            raise _OutOfBounds(
                where, f"nested deeper than {bounds.MAX_DEPTH} levels",
                "no field of an RLExperiment is this deep; check the indentation",
            )  # fmt: skip
        anchor = getattr(self.peek_event(), "anchor", None)
        before = self._count
        self._add(1, where)
        if isinstance(index, ScalarNode | int):
            self._path.append(index.value if isinstance(index, ScalarNode) else index)
            try:
                node = super().compose_node(parent, index)
            finally:
                self._path.pop()
        else:  # the root, or a mapping key
            node = super().compose_node(parent, index)
        if anchor is not None:  # what an alias to it will cost
            self._weights[id(node)] = self._count - before
        composed: Node = node
        return composed

    def _add(self, count: int, where: str) -> None:
        self._count += count
        if self._count > bounds.MAX_NODES:
            raise _OutOfBounds(
                where,
                f"the document holds more than {bounds.MAX_NODES:,} values (after expanding "
                "YAML aliases)",
                "an experiment holds a few hundred; remove the repeated anchors/aliases",
            )

    def _where(self, index: Any) -> str:
        path = ""
        for part in [*self._path, *([index.value] if isinstance(index, ScalarNode) else [])]:
            path = bounds.join(path, part if isinstance(part, int) else str(part))
        if isinstance(index, int):
            path = bounds.join(path, index)
        return path


_CONVERT_HINT = (
    "kubectl converts YAML to JSON before sending it; quote the value to make it a string"
)


def _yaml_reason(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return str(problem)
