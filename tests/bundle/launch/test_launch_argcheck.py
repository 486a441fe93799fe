"""The launcher's own rules around the composed argv: unknown flags, argparse's last value,
and the env it prints."""

from __future__ import annotations

from agentrl.bundle.launch import argcheck, main
from agentrl.slimecmd import Part


def test_unknown_flags_are_named_with_origin_and_suggestion() -> None:
    parts = [
        Part("launcher", ("python3", "train.py")),
        Part("rendered", ("--lr", "1e-6", "--use-dynamic-batch-size")),
        Part("spec.runtime.extraArgs", ("--use-dynamic-global-batch-size", "--lr=2e-6", "-5")),
    ]
    known = frozenset({"--lr", "--use-dynamic-batch-size"})
    bad = argcheck.unknown_flags(parts, known)
    assert bad == [("--use-dynamic-global-batch-size", "spec.runtime.extraArgs")]
    message = argcheck.unknown_flags_message(bad, known)
    assert "did you mean --use-dynamic-batch-size?" in message
    assert "from spec.runtime.extraArgs" in message
    assert argcheck.unknown_flags(parts[:2], known) == []


def test_an_underscored_flag_is_not_read_as_a_known_prefix() -> None:
    known = frozenset({"--save", "--save-interval", "--eval-interval"})
    parts = [
        Part("launcher", ("python3", "train.py")),
        Part("spec.runtime.extraArgs", ("--save_interval", "5", "--eval_interval=2")),
    ]
    bad = argcheck.unknown_flags(parts, known)
    assert [flag for flag, _ in bad] == ["--save_interval", "--eval_interval"]
    assert "did you mean --save-interval?" in argcheck.unknown_flags_message(bad, known)


def test_flag_value_is_argparses_last() -> None:
    assert argcheck.flag_value(["--a", "1", "--a=2"], "--a") == "2"
    assert argcheck.flag_value(["--a", "1", "--ab", "3"], "--a") == "1"
    assert argcheck.flag_value(["--a"], "--a") is None


def test_redact() -> None:
    env = {"WANDB_API_KEY": "s3cret", "AGENTRL_HTTP_HEADER_0": "Bearer x", "CUDA_HOME": "/c"}
    assert main.redact(env, ["AGENTRL_HTTP_HEADER_0"]) == {
        "AGENTRL_HTTP_HEADER_0": "<redacted>",
        "CUDA_HOME": "/c",
        "WANDB_API_KEY": "<redacted>",
    }
