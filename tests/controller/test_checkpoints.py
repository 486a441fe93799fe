"""Two experiments writing one checkpoint directory: where each path lies, and who keeps it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from tests.conftest import minimal_body

from agentrl.api.constants import ConditionType as C
from agentrl.controller import checkpoints, conditions, status
from agentrl.controller.checkpoints import Location

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"
CLAIM = {"name": "ckpt", "persistentVolumeClaim": {"claimName": "rl-checkpoints"}}
OTHER_CLAIM = {"name": "ckpt", "persistentVolumeClaim": {"claimName": "other"}}


def body(name: str, path: str | None = "/checkpoints/run", *, created: str = T0,
         volume: dict[str, Any] | None = None, sub: str | None = None,
         mount_path: str = "/checkpoints",
         st: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """An experiment (as the API server lists it) with its checkpoint on one volume."""
    mount: dict[str, Any] = {"name": "ckpt", "mountPath": mount_path}
    if sub is not None:
        mount["subPath"] = sub
    runtime = {"volumes": [volume or CLAIM], "volumeMounts": [mount]}
    doc = minimal_body(runtime=runtime, checkpoint={"path": path} if path else {})
    doc["metadata"] = {"name": name, "namespace": "rl", "creationTimestamp": created}
    if st is not None:
        doc["status"] = st
    return doc


RUNNING = {"phase": "Running", "rayJobName": "first"}


def running(name: str = "first", **kw: Any) -> dict[str, Any]:
    return body(name, st={**RUNNING, "rayJobName": name}, **kw)


def clash(this: dict[str, Any], *others: dict[str, Any]) -> str | None:
    found = checkpoints.collision(this, [this, *others])  # the list holds `this` too
    return None if found is None else found.other


def test_where_a_path_lies() -> None:
    spec = body("a", "/checkpoints/run/", sub="team-a")["spec"]
    assert checkpoints.location(spec) == Location(
        ("persistentVolumeClaim", "rl-checkpoints"), "/team-a/run",
        "PersistentVolumeClaim rl-checkpoints",
    )  # fmt: skip
    nfs = {"name": "ckpt", "nfs": {"server": "fs.local", "path": "/export", "readOnly": False}}
    assert checkpoints.location(body("a", "/checkpoints/x", volume=nfs, sub="s")["spec"]) == (
        Location(("nfs", "fs.local"), "/export/s/x", "NFS server fs.local")
    )
    node = {"name": "ckpt", "hostPath": {"path": "/data", "type": "Directory"}}
    assert checkpoints.location(body("a", volume=node, sub="x")["spec"]) == (
        Location(("hostPath", ""), "/data/x/run", "a node's hostPath")
    )
    assert checkpoints.location(body("a", None)["spec"]) is None
    assert checkpoints.location(body("a", "/elsewhere/run")["spec"]) is None  # on no volume
    scratch = {"name": "ckpt", "emptyDir": {}}
    assert checkpoints.location(body("a", volume=scratch)["spec"]) is None  # each pod's own
    expr = body("a")
    expr["spec"]["runtime"]["volumeMounts"][0]["subPathExpr"] = "$(POD_NAME)"
    assert checkpoints.location(expr["spec"]) is None  # expanded per container


@pytest.mark.parametrize(
    ("this", "collides"),
    [
        pytest.param(body("b"), True, id="same-claim-same-path"),
        pytest.param(body("b", "/checkpoints/run/"), True, id="trailing-slash"),
        pytest.param(body("b", "/checkpoints/run/v2"), True, id="inside-the-other"),
        pytest.param(body("b", "/checkpoints"), True, id="above-the-other"),
        pytest.param(body("b", "/checkpoints/run2"), False, id="sibling-directory"),
        # The same directory reached through another mount: subPath "run", mounted at /c.
        pytest.param(body("b", "/c", sub="run", mount_path="/c"), True, id="via-sub-path"),
        pytest.param(body("b", sub="team-b"), False, id="different-sub-path"),
        pytest.param(body("b", volume=OTHER_CLAIM), False, id="different-claim"),
        pytest.param(body("b", None), False, id="no-checkpoint"),
    ],
)
def test_the_same_directory(this: dict[str, Any], collides: bool) -> None:
    assert clash(this, running()) == ("first" if collides else None)


def test_who_keeps_it() -> None:
    # A finished run's checkpoint may be taken on purpose (going on from it).
    deadline = {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}
    done = [{"phase": "Succeeded", "rayJobName": "first"},
            {"phase": "Failed", "rayJobName": "first", "conditions": [deadline]}]  # fmt: skip
    for st in done:
        assert status.finished(st)
        assert clash(body("b", created=T1), body("first", st=st)) is None
    # One with a RayJob keeps it, even against an older experiment.
    assert clash(body("old", created=T0), running(created=T1)) == "first"
    # Suspended or Pending with a RayJob: it writes there again when it resumes or starts.
    for phase in ("Suspended", "Pending", "Initializing"):
        assert clash(body("b", created=T1), body("first", st={**RUNNING, "phase": phase})) == (
            "first"
        )
    # Neither has a RayJob yet (applied together): the older keeps it, then the name.
    assert clash(body("b", created=T1), body("a", created=T0)) == "a"
    assert clash(body("a", created=T0), body("b", created=T1)) is None
    assert clash(body("b", created=T0), body("a", created=T0)) == "a"
    assert clash(body("a", created=T0), body("b", created=T0)) is None
    # An older one Failed for its spec creates nothing until it changes (checked again then).
    invalid = {"phase": "Failed", "conditions": [
        {"type": "Failed", "status": "True", "reason": "InvalidSpec"}]}  # fmt: skip
    assert not status.finished(invalid)
    assert clash(body("b", created=T1), body("a", created=T0, st=invalid)) is None
    # Being deleted: it does not keep it.
    going = running()
    going["metadata"]["deletionTimestamp"] = T1
    assert clash(body("b"), going) is None


def test_the_message_names_the_other_the_field_and_the_fix() -> None:
    found = checkpoints.collision(body("b", "/checkpoints/run/v2", created=T1), [running()])
    assert found is not None
    text = found.message
    assert text.startswith("spec.checkpoint.path /checkpoints/run/v2 (/run/v2 on "
                           "PersistentVolumeClaim rl-checkpoints) is inside")  # fmt: skip
    assert "RLExperiment first (/checkpoints/run, /run there), which is Running" in text
    assert "it has RayJob first" in text
    assert "a distinct spec.checkpoint.path, or a distinct subPath" in text
    assert "delete this experiment and apply it again once first has finished" in text


def test_a_refusal_stays_for_its_generation() -> None:
    clash_text = "spec.checkpoint.path ... RLExperiment first ..."
    st = status.apply_spec({}, status.SpecOutcome(generation=3, checkpoint_conflict=clash_text), T0)
    st = status.apply_observed(st, status.Observed(None), T0)
    assert st["phase"] == "Failed" and not status.finished(st)
    assert conditions.get(st, C.FAILED)["reason"] == "CheckpointConflict"  # type: ignore[index]
    assert conditions.get(st, C.FAILED)["message"] == clash_text  # type: ignore[index]
    assert checkpoints.held(st, 3) == clash_text
    assert checkpoints.held(st, 4) is None  # a spec change is checked again
    # A later generation that goes through: Resolved, and the phase follows its RayJob.
    ok = status.apply_spec(copy.deepcopy(st), status.SpecOutcome(generation=4,
                                                                  rayjob_name="b"), T1)  # fmt: skip
    ok = status.apply_observed(ok, status.Observed({}), T1)
    cond = conditions.get(ok, C.CHECKPOINT_CONFLICT)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "Resolved"
    assert ok["phase"] == "Pending" and checkpoints.held(ok, 4) is None
    # One Warning event, CheckpointConflict, with the message; not a second one for Failed.
    events = conditions.events_between({"phase": "Pending"}, st)
    assert [(e.type, e.reason, e.message) for e in events] == [
        ("Warning", "CheckpointConflict", clash_text)
    ]
