"""The gang preflight's judgement on real output formats (agentrl.bundle.launch.gang).

nvidia-smi rows are what `--query-gpu=<HEALTH_FIELDS> --format=csv,noheader,nounits` prints:
the values below are those of real captures (utkuozdemir/nvidia_gpu_exporter's
internal/captures at e656cd8: an H100 80GB HBM3 and an H200 on drivers 590.48.01, an L40S on
595.80, a GeForce RTX 2080 SUPER and an H100 in MIG mode), rearranged in our field order.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from agentrl.api.models import PreflightSpec
from agentrl.bundle.launch import gang, gangrun, probe

H100 = "0, 00000000:00:09.0, 0, No, No, None"
L40S = "0, 00000000:01:00.0, 0, No, No, None"
GEFORCE = "0, 00000000:0C:00.0, [N/A], [N/A], [N/A], None"  # no ECC, no row remapper
H100_MIG = "0, 00000000:00:09.0, 0, [N/A], [N/A], None"


def health(*rows: str) -> list[str]:
    text = "\n".join(rows) + "\n"
    return gang.gpu_health_problems(gang.parse_gpu_health(text, gang.HEALTH_FIELDS))


def test_healthy_gpus_of_every_kind_pass() -> None:
    assert health(H100, L40S, GEFORCE, H100_MIG) == []


def test_uncorrectable_ecc_a_pending_or_failed_remap_and_a_recovery_action_are_named() -> None:
    found = health(
        "0, 00000000:18:00.0, 2, No, No, None",
        "1, 00000000:2A:00.0, 0, Yes, No, None",
        "2, 00000000:3A:00.0, 0, No, Yes, None",
        "3, 00000000:5D:00.0, 0, No, No, Reset",
        H100.replace("0, 00000000:00:09.0", "4, 00000000:9A:00.0"),
    )
    assert found == [
        "GPU 0 (00000000:18:00.0): 2 uncorrectable ECC errors since the driver loaded",
        "GPU 1 (00000000:2A:00.0): a row remap is pending (the GPU needs a reset)",
        "GPU 2 (00000000:3A:00.0): row remapping failed (replace the GPU)",
        "GPU 3 (00000000:5D:00.0): the driver asks for recovery action 'Reset' after an Xid error",
    ]


def test_what_nvidia_smi_cannot_report_is_not_a_problem() -> None:
    assert health("0, 00000000:00:09.0, [Not Supported], [Unknown Error], [N/A], [N/A]") == []


def fake_nvidia_smi(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "bin" / "nvidia-smi"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return str(exe.parent)


def test_an_older_nvidia_smi_is_asked_for_ecc_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nvidia-smi refuses a query naming a field it does not know, whole.
    body = """case "$1" in
  *gpu_recovery_action*) echo 'Field "gpu_recovery_action" is not a valid field to query.' >&2
     exit 2 ;;
  *) echo "0, 00000000:00:09.0, 1" ;;
esac"""
    monkeypatch.setenv("PATH", fake_nvidia_smi(tmp_path, body))
    problems, note = probe.gpu_health()
    assert problems == [
        "GPU 0 (00000000:00:09.0): 1 uncorrectable ECC errors since the driver loaded"
    ]
    assert note is not None and "reads ECC only" in note


def test_a_failing_nvidia_smi_is_a_note_not_a_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "PATH", fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    )
    problems, note = probe.gpu_health()
    assert (
        problems == [] and note == "nvidia-smi failed, GPU health not read: NVIDIA-SMI has failed"
    )


def test_bus_bandwidth_is_nccl_tests_formula() -> None:
    # An 8-GPU all_reduce_perf row (stas00/ml-engineering network/README.md at 744d01e):
    # 8 GiB in 64074 us -> algbw 134.06 GB/s, busbw 234.61 GB/s.
    nbytes, seconds = 8_589_934_592, 64074e-6
    assert round(nbytes / 1e9 / seconds, 2) == 134.06
    assert round(gang.bus_bandwidth(nbytes, seconds, 8), 2) == 234.61
    assert gang.bus_bandwidth(nbytes, seconds, 1) == 0.0  # one rank moves nothing


@pytest.mark.parametrize("nodes", range(1, 10))
def test_pair_rounds_cover_every_pair_once_and_each_node_once_a_round(nodes: int) -> None:
    rounds = gang.pair_rounds(nodes)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == list(itertools.combinations(range(nodes), 2))
    for r in rounds:
        members = [n for p in r for n in p]
        assert len(members) == len(set(members))
    assert len(rounds) == (0 if nodes == 1 else nodes - 1 if nodes % 2 == 0 else nodes)


EXPECT = gang.Expect(
    gpus_per_node=8,
    shm_bytes=64 << 30,
    shm_size="64Gi",
    cuda_major=12,
    cuda_home="/usr/local/cuda",
    interconnect={"vpc.amazonaws.com/efa": {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}},
)


def facts(**kw: object) -> gang.NodeFacts:
    base: dict[str, object] = {
        "pod": "p",
        "node": "n",
        "ray_node": "r",
        "visible_gpus": 8,
        "shm_bytes": 64 << 30,
        "cuda_major": 12,
        "rdma_devices": ["/dev/infiniband/uverbs0"],
        "env": {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"},
    }
    return gang.NodeFacts(**{**base, **kw})  # type: ignore[arg-type]


def checks(f: gang.NodeFacts) -> list[str]:
    problems, _ = gang.node_problems(f, EXPECT)
    return [p.check for p in problems]


def test_a_sound_node_passes() -> None:
    assert gang.node_problems(facts(), EXPECT) == ([], [])


def test_each_node_fault_is_its_own_check() -> None:
    assert checks(facts(visible_gpus=7)) == [gang.CHECK_GPU_COUNT]
    assert checks(facts(gpu_health=["GPU 3 (x): 2 uncorrectable ECC errors"])) == [
        gang.CHECK_GPU_HEALTH
    ]
    assert checks(facts(shm_bytes=64 << 20)) == [gang.CHECK_SHM]
    assert checks(facts(shm_bytes=None, shm_error="No such file or directory")) == [gang.CHECK_SHM]
    assert checks(facts(cuda_major=13)) == [gang.CHECK_CUDA]
    assert checks(facts(cuda_major=None, cuda_error="two majors")) == [gang.CHECK_CUDA]
    assert checks(facts(rdma_devices=[])) == [gang.CHECK_INTERCONNECT]
    assert checks(facts(env={"FI_PROVIDER": "efa"})) == [gang.CHECK_INTERCONNECT]


def test_no_nvidia_smi_is_a_warning_naming_the_pod() -> None:
    problems, warnings = gang.node_problems(facts(visible_gpus=None), EXPECT)
    assert problems == []
    assert [w.line() for w in warnings] == [
        "pod p on node n: GpuCount: GPUs not counted (nvidia-smi not found)"
    ]


def test_the_node_facts_of_this_machine_are_read_from_its_own_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """node_facts on a temporary root: /dev/shm's size, the RDMA devices, the env."""
    import ray

    (tmp_path / "dev" / "shm").mkdir(parents=True)
    (tmp_path / "dev" / "infiniband").mkdir()
    (tmp_path / "dev" / "infiniband" / "uverbs0").write_text("")
    monkeypatch.setenv("PATH", fake_nvidia_smi(tmp_path, "echo 'GPU 0: NVIDIA H100'"))
    monkeypatch.setenv("AGENTRL_POD_NAME", "rlx-gpu-0")
    monkeypatch.setenv("AGENTRL_NODE_NAME", "ip-10-0-0-1")
    monkeypatch.setenv("FI_PROVIDER", "efa")

    class Context:
        def get_node_id(self) -> str:
            return "n1"

    monkeypatch.setattr(ray, "get_runtime_context", Context)
    got = gangrun.node_facts(EXPECT, tmp_path)
    assert (got.pod, got.node, got.ray_node, got.visible_gpus) == (
        "rlx-gpu-0",
        "ip-10-0-0-1",
        "n1",
        1,
    )
    assert got.shm_bytes is not None and got.shm_bytes > 0
    assert got.rdma_devices == [str(tmp_path / "dev" / "infiniband" / "uverbs0")]
    assert got.env == {"FI_EFA_USE_DEVICE_RDMA": "", "FI_PROVIDER": "efa"}
    assert got.cuda_error is not None and "does not exist" in got.cuda_error  # no toolkit there


SPOTS = [gang.RankSpot(r, r // 2, r % 2, f"pod w{r // 2}") for r in range(4)]


def test_ranks_that_never_joined_are_named_and_the_waiting_ones_are_not() -> None:
    problems = gang.collective_problems(SPOTS, {0, 1}, {}, 30, None)
    assert [p.line() for p in problems] == [
        f"pod w1: AllReduce: rank {r} (GPU {r % 2}) did not join the all-reduce within 30 s: "
        "its node is hung, cannot reach the driver's pod, or Ray could not start a process there"
        for r in (2, 3)
    ]


def test_a_failed_rank_is_named_and_the_ones_it_left_waiting_are_not() -> None:
    results = {1: gang.RankResult(1, error="RuntimeError: CUDA error: invalid device ordinal")}
    problems = gang.collective_problems(SPOTS, {0, 2}, results, 30, "rank 1 failed")
    assert [p.line() for p in problems] == [
        "pod w0: AllReduce: rank 1: RuntimeError: CUDA error: invalid device ordinal"
    ]


def test_a_collective_that_hangs_with_every_rank_joined_says_so() -> None:
    results = {r: gang.RankResult(r, gang_seconds=0.1) for r in (0, 1)}
    (problem,) = gang.collective_problems(SPOTS, {0, 1, 2, 3}, results, 30, None)
    assert "ranks 2, 3 did not finish within 30 s" in problem.message


def test_a_wrong_sum_is_a_problem() -> None:
    results = {0: gang.RankResult(0, wrong_result="returned [3.0]")}
    (problem,) = gang.collective_problems(SPOTS[:1], {0}, results, 30, None)
    assert problem.line() == "pod w0: AllReduce: rank 0: returned [3.0]"


def pair_results() -> dict[int, gang.RankResult]:
    # Two nodes of two ranks: the pair's ranks took 10 and 12 ms for 100 MB.
    return {
        r: gang.RankResult(r, gang_seconds=0.02, pair_seconds={"0-1": 0.010 if r < 2 else 0.012})
        for r in range(4)
    }


def test_pair_bandwidth_averages_the_pairs_ranks_as_nccl_tests_does() -> None:
    (pair,) = gang.pair_bandwidths(SPOTS, pair_results(), 100_000_000)
    assert (pair.a, pair.b, pair.ranks) == (0, 1, 4)
    assert pair.busbw_gbps == pytest.approx(100_000_000 / 1e9 / 0.011 * 1.5)
    assert gang.gang_bandwidth(SPOTS, pair_results(), 100_000_000) == pytest.approx(7.5)


@pytest.mark.parametrize(("action", "fails"), [("warn", False), ("fail", True)])
def test_low_bandwidth_warns_or_fails_as_the_spec_says(action: str, fails: bool) -> None:
    pairs = gang.pair_bandwidths(SPOTS, pair_results(), 100_000_000)
    spec = PreflightSpec.model_validate({"minBusBandwidthGBps": 40, "onLowBandwidth": action})
    problems, warnings = gang.bandwidth_findings(pairs, spec)
    (low,) = problems if fails else warnings
    assert low.line().startswith("pod w0 and pod w1: BusBandwidth: all-reduce bus bandwidth 13.6")
    assert gang.bandwidth_findings(pairs, PreflightSpec()) == ([], [])


def test_the_report_leads_with_the_first_problem() -> None:
    report = gang.Report(2, 4, "nccl", 1 << 28)
    assert report.passed and report.reason() == "Passed"
    report.problems += [
        gang.Problem(gang.CHECK_SHM, "pod a on node b", "small"),
        gang.Problem(gang.CHECK_CUDA, "pod c on node d", "other"),
    ]
    assert report.reason() == gang.CHECK_SHM
    assert report.summary() == "pod a on node b: Shm: small (and 1 more problem)"
