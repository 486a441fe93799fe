"""`agentrl validate` reads a file exactly as `kubectl apply -f` sends it: a differential test.

The real kubectl applies each file to the real kube-apiserver; what the server stored is read
back and compared with agentrl's reading of the same file (`agentrl.cli.load`), value for
value and type for type. The probe values sit in `spec.resources.affinity`, which the CRD
keeps verbatim (x-kubernetes-preserve-unknown-fields), so nothing is pruned or defaulted on
the way; typed spellings (`learningRate: 1e-6`) go through whole experiments, which both
sides must admit with the same spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import minimal_body
from tests.support.kube import KubeHarness

from agentrl.api.validation import errors, parse_experiment
from agentrl.cli import kubeyaml
from agentrl.cli.load import load_documents, unset_type

pytestmark = pytest.mark.e2e
NS = "rl"

# Every plain-scalar spelling where PyYAML and go-yaml (kubectl) disagree, and their
# neighbours, as `key: value` lines of one mapping.
PROBES = """\
exponent: 1e-6
exponentSmall: 5e-7
exponentPadded: 1e-06
exponentUpper: 2E3
exponentWhole: 1e3
exponentHuge: 1e400
exponentTiny: 2E-999999999
floatWhole: 2.0
floatPoint: 3.
floatLeadingDot: .5
floatSigned: -.25
floatBig: 1e21
int64: 9223372036854775807
octal: 017
octalPrefix: 0o17
notOctal: 08
hex: 0x1F
binary: 0b101
underscores: 1_000
plus: +12
yesShort: y
noShort: n
yesUpper: Y
yesWord: yes
noWord: NO
onWord: on
offWord: Off
tilde: ~
empty:
nullWord: Null
sexagesimal: 1:30
sexagesimalFloat: 190:20:30.15
date: 2024-02-28
dateInvalid: 2024-02-30
dateTime: 2001-12-14t21:59:43.10-05:00
equals: =
nanWord: nan
infWord: inf
quotedNumber: "1e-6"
quotedBool: 'y'
tagged: !!float 1
taggedStr: !!str 017
custom: !thing value
binaryBlob: !!binary aGVsbG8=
explicitNull: !!null ~
list: [1, !!null "", y, 1e-6]
block: |
  text
anchor: &base {a: 1, b: 2}
merged: {a: 0, <<: *base, c: 3}
mergedLater: {<<: *base, a: 9}
keys: {y: 1, n: 2, 1: 4, 1.5: 5, 1e10: 6, 0.00001: 7, 123456: 9, 1234567.0: 10, 0.1: 11}
keysMore: {on: 3, 1.0: 8, -0.0: 12, 16777217.0: 13}
"""

# (case, text of the base document, what replaces it)
SPELLINGS = [
    ("lr-exponent", "numRollouts: 10\n", "numRollouts: 10\n    learningRate: 1e-6\n"),
    ("lr-small", "numRollouts: 10\n", "numRollouts: 10\n    learningRate: 5e-7\n"),
    ("lr-padded", "numRollouts: 10\n", "numRollouts: 10\n    learningRate: 1e-06\n"),
    ("rollouts-exponent", "numRollouts: 10", "numRollouts: 1e1"),
    ("nodes-float", "  grpo:\n", "  resources:\n    nodes: 1.0\n    memory: 1e12\n  grpo:\n"),
    ("suspend-y", "  grpo:\n", "  suspend: y\n  grpo:\n"),
    ("shuffle-n", "train.jsonl\n", "train.jsonl\n    shuffle: n\n"),
]


@pytest.fixture(scope="module")
def kube(kube_harness: KubeHarness) -> KubeHarness:
    kube_harness.ensure_namespace(NS)
    return kube_harness


def _document(name: str, **spec: Any) -> str:
    body = minimal_body(**spec)
    body["metadata"]["name"] = name
    return yaml.safe_dump(body, sort_keys=False)


def _ours(path: Path) -> Any:
    (doc,) = load_documents([str(path)])
    assert doc.problems == [], doc.problems
    return doc.body


def _stored(kube: KubeHarness, name: str) -> Any:
    return kube.kubectl_json("get", "rlx", name, "-n", NS)


def test_kubectl_stores_every_probe_as_agentrl_reads_it(kube: KubeHarness, tmp_path: Path) -> None:
    text = _document("yaml-probes", resources={"affinity": {"probes": "HERE"}})
    probes = "".join(f"        {line}\n" for line in PROBES.splitlines())
    text = text.replace("      probes: HERE\n", "      probes:\n" + probes)
    path = tmp_path / "probes.yaml"
    path.write_text(text)
    proc = kube.kubectl("apply", "-f", str(path), check=False)
    assert proc.returncode == 0, proc.stderr
    stored = _stored(kube, "yaml-probes")["spec"]["resources"]["affinity"]["probes"]
    ours = _ours(path)["spec"]["resources"]["affinity"]["probes"]
    for key in sorted(set(stored) | set(ours)):
        # The API server drops null fields of a CRD object (they are not nullable); kubectl
        # sent them, as agentrl reads them.
        mine = ours.get(key, "<absent>")
        theirs = stored.get(key, "<absent>" if mine is not None else None)
        assert (key, mine) == (key, theirs)
        assert type(mine) is type(theirs), key
    # What PyYAML got wrong, pinned (the server's reading, now agentrl's):
    assert ours["exponent"] == 1e-6 and ours["yesShort"] is True and ours["noShort"] is False
    assert ours["sexagesimal"] == "1:30" and ours["date"] == "2024-02-28"
    assert ours["floatWhole"] == 2 and type(ours["floatWhole"]) is int
    assert ours["explicitNull"] is None and ours["list"] == [1, None, True, 1e-6]
    assert ours["keys"]["true"] == 1 and ours["keys"]["1e+10"] == 6
    assert ours["keysMore"] == {"true": 3, "1": 8, "-0": 12, "1.6777216e+07": 13}


BEYOND_INT64 = ["99999999999999999999", "18446744073709551615", "-9223372036854775809"]


def test_integers_beyond_int64_reach_the_server_as_agentrl_reads_them(
    kube: KubeHarness, tmp_path: Path
) -> None:
    """kubectl sends them as float64 in Go's shortest digits; `agentrl validate` refuses them
    (the bounds check), but reads them the same way first."""
    text = _document("beyond-int64", resources={"affinity": {"probes": "HERE"}})
    lines = "".join(f"        n{i}: {number}\n" for i, number in enumerate(BEYOND_INT64))
    path = tmp_path / "beyond.yaml"
    path.write_text(text.replace("      probes: HERE\n", "      probes:\n" + lines))
    assert kube.kubectl("apply", "-f", str(path), check=False).returncode == 0
    stored = _stored(kube, "beyond-int64")["spec"]["resources"]["affinity"]["probes"]
    for i, number in enumerate(BEYOND_INT64):
        ours = kubeyaml.json_number(kubeyaml.resolve("", number)[1])
        assert (ours, type(ours)) == (stored[f"n{i}"], type(stored[f"n{i}"]))
    (doc,) = load_documents([str(path)])
    beyond = "integer outside the 64-bit range Kubernetes stores"
    assert {p.message for p in doc.problems} == {beyond}


@pytest.mark.parametrize(("case", "find", "spelling"), SPELLINGS, ids=[s[0] for s in SPELLINGS])
def test_typed_spellings_mean_the_same_to_both(
    kube: KubeHarness, tmp_path: Path, case: str, find: str, spelling: str
) -> None:
    text = _document(f"spelling-{case}")
    assert find in text
    text = text.replace(find, spelling, 1)
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    exp, problems = parse_experiment(_ours(path))
    assert exp is not None and errors(problems) == [], problems
    proc = kube.kubectl("apply", "-f", str(path), check=False)
    assert proc.returncode == 0, proc.stderr
    stored, _ = parse_experiment(_stored(kube, f"spelling-{case}"))
    assert stored is not None and stored.spec == exp.spec


def test_a_key_kubectl_cannot_convert_is_refused_by_both(kube: KubeHarness, tmp_path: Path) -> None:
    path = tmp_path / "null-key.yaml"
    path.write_text(_document("null-key", resources={"nodeSelector": {}}).replace(
        "nodeSelector: {}", "nodeSelector:\n      ~: gpu"
    ))  # fmt: skip
    proc = kube.kubectl("apply", "-f", str(path), check=False)
    assert proc.returncode != 0 and "unsupported map key" in proc.stderr
    (doc,) = load_documents([str(path)])
    assert [p.path for p in doc.problems] == ["spec.resources.nodeSelector.~"]


def test_a_document_without_apiversion_and_kind_is_refused_by_both(
    kube: KubeHarness, tmp_path: Path
) -> None:
    body = yaml.safe_load(_document("untyped"))
    del body["apiVersion"], body["kind"]
    path = tmp_path / "untyped.yaml"
    path.write_text(yaml.safe_dump(body))
    proc = kube.kubectl("apply", "-f", str(path), check=False)
    assert proc.returncode != 0 and "apiVersion not set, kind not set" in proc.stderr
    (doc,) = load_documents([str(path)])
    assert doc.problems == [] and [p.path for p in unset_type(doc.body)] == ["apiVersion", "kind"]


def test_a_duplicated_key_is_refused_where_kubectl_keeps_the_last(
    kube: KubeHarness, tmp_path: Path
) -> None:
    """The one deliberate difference: kubectl sends the last value silently."""
    path = tmp_path / "duplicate.yaml"
    twice = "numRollouts: 10\n    numRollouts: 7"
    path.write_text(_document("duplicate").replace("numRollouts: 10", twice))
    assert kube.kubectl("apply", "-f", str(path), check=False).returncode == 0
    assert _stored(kube, "duplicate")["spec"]["grpo"]["numRollouts"] == 7
    (doc,) = load_documents([str(path)])
    assert [p.path for p in doc.problems] == ["spec.grpo.numRollouts"]
