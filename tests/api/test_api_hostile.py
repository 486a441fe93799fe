"""The hostile-spec corpus (tests/api/hostile, issue 12 section 1): every case is refused
naming its field, or warned, by `agentrl validate`, and `agentrl render` agrees; none
crashes, hangs or passes silently.

Each case runs through the real CLI entry point in this process; the crash class (inputs
that used to raise, hang or blow up memory) also runs in a child process under CPU and
address-space limits, so a regression is a failed test, not a stuck suite. The table script
(`benchmarks/hostile_specs.py`) is the same code; its quick mode runs here too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from tests.support import hostile_specs

CLASSES = {"crash", "k8s", "render", "strict", "paths", "secrets", "typos"}


hs = hostile_specs.load()
CASES = hs.load_corpus(hs.CORPUS)


def test_corpus_covers_every_class_of_issue_12() -> None:
    per_class = Counter(c.klass for c in CASES)
    assert set(per_class) == CLASSES
    assert all(count >= 7 for count in per_class.values()), per_class
    assert len(CASES) >= 150
    for case in CASES:
        assert case.title and case.expect in ("refused", "warned") and case.expect_path, case


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: object, tmp_path: Path) -> None:
    file = hs._materialise(case, str(tmp_path))
    verdict = hs.classify(case, hs.run_here(file), file)
    assert hs.expected(verdict), (verdict.outcome, verdict.detail, verdict.lines)


CRASH_CLASS = [c for c in CASES if c.klass == "crash"]


@pytest.mark.slow
@pytest.mark.parametrize("case", CRASH_CLASS, ids=[c.name for c in CRASH_CLASS])
def test_crash_class_in_a_bounded_process(case: object, tmp_path: Path) -> None:
    """Under RLIMIT_CPU and RLIMIT_AS: a hang or a memory blow-up kills the child."""
    file = hs._materialise(case, str(tmp_path))
    verdict = hs.classify(case, hs.run_isolated(file), file)
    assert hs.expected(verdict), (verdict.outcome, verdict.detail)


def test_table_script_prints_the_counts(tmp_path: Path) -> None:
    """The script end to end (a sample of each class; test_case covers every case)."""
    sample = [next(c for c in CASES if c.klass == k) for k in sorted(CLASSES)]
    for case in sample:
        (tmp_path / case.name).write_bytes(case.path.read_bytes())
    proc = subprocess.run(
        [
            sys.executable,
            str(hostile_specs.SCRIPT),
            "--quick",
            "--json",
            "--no-apiserver",
            "--corpus",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    counts = json.loads(proc.stdout)
    assert counts["tried"] == len(sample) and counts["unexpected"] == []
    assert counts["crashed_or_hung"] == counts["silently_accepted"] == counts["vague"] == 0
    assert counts["refused_naming_the_field"] + counts["warned"] == len(sample)
    table = subprocess.run(
        [sys.executable, str(hostile_specs.SCRIPT), "--quick", "--no-apiserver", "--corpus",
         str(tmp_path)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert table.splitlines()[0] == "| specs tried | " + " | ".join(hs.OUTCOMES) + " |"


def test_headerless_corpus_is_judged_by_the_cli_words(tmp_path: Path) -> None:
    """A held-out corpus may carry no header: refused naming a field, warned, or neither."""
    base = (hs.CORPUS / "render-kl-inf.yaml").read_text()
    (tmp_path / "a.yaml").write_text("\n".join(base.splitlines()[3:]) + "\n")
    (tmp_path / "b.yaml").write_text("# nothing but a comment\n")
    accepted = base.replace("klLossCoef: .inf", "klLossCoef: 0.1")
    (tmp_path / "c.yaml").write_text("\n".join(accepted.splitlines()[3:]) + "\n")
    verdicts = {v.case.name: v.outcome for v in hs.judge(hs.load_corpus(tmp_path), False)}
    assert verdicts == {"a.yaml": hs.REFUSED, "b.yaml": hs.VAGUE, "c.yaml": hs.ACCEPTED}


def test_isolated_runs_are_bounded_and_a_killed_child_counts_as_crashed() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import resource as r; print(r.getrlimit(r.RLIMIT_CPU)[0], "
         "r.getrlimit(r.RLIMIT_AS)[0])"],
        capture_output=True, text=True, check=True, preexec_fn=hs._limits,
    )  # fmt: skip
    assert proc.stdout.split() == [str(hs.CPU_SECONDS), str(hs.ADDRESS_SPACE)]
    case = CASES[0]
    verdict = hs.classify(case, hs.Run(crash="killed by SIGXCPU: "), str(case.path))
    assert verdict.outcome == hs.CRASHED and not hs.expected(verdict)
