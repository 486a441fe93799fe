"""How long `agentrl rehearse` takes for 8 episodes, against `agentrl validate` in the same run.

The promise is a rehearsal in under a minute for 8 episodes, before any GPU. Measured here on
docs/rehearse.md's walkthrough: the HTTP-agent example (1 prompt x its 8 samples), the
example agent (examples/agents/http_agent.py) in its own process, the SGLang protocol stub
as the engine (a real SGLang server adds its own generation time on top), the tiny test
checkpoint as the tokenizer and chat template. Each run is the whole command, as a user
types it: interpreter start, imports, spec, gateway start, 8 episodes, samples and report.

Printed (seconds are the best of the runs):
- `rehearse_s`: `agentrl rehearse` for 8 episodes, process start to exit;
- `episodes_s`: the part of it from the engine check to the report (report.json `seconds`);
- `validate_s`: `agentrl validate` on the same spec (starting the CLI and judging the spec),
  the baseline, and `rehearse_vs_validate` the ratio;
- `budget_s`: 60, and whether `rehearse_s` is within it.

    python benchmarks/rehearse.py            # 5 runs of each
    python benchmarks/rehearse.py --quick    # 1 run (the test runs this)
    python benchmarks/rehearse.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.bundle.rehearse.rig import (  # noqa: E402
    EXAMPLE_AGENT,
    Model,
    rehearse,
    run_agent,
    start_engine,
)
from tests.support.tiny_tokenizer import write_checkpoint  # noqa: E402

from agentrl.bundle.gateway.tokenizer import load_tokenizer  # noqa: E402

EXAMPLE = ROOT / "examples" / "qwen2.5-7b-http-agent-two-evals.yaml"
DATA = ROOT / "examples" / "data" / "web-train.jsonl"
POLICY = ROOT / "examples" / "platform" / "policy.yaml"
BUDGET_S = 60.0
TOKEN = "bench-secret"


async def timed(*args: str | Path, env: dict[str, str] | None = None) -> tuple[float, Any]:
    start = time.perf_counter()
    run = await rehearse(*args, env=env) if args[0] != "validate" else await _cli(*args)
    return time.perf_counter() - start, run


async def _cli(*args: str | Path) -> int:
    exe = shutil.which("agentrl", path=str(Path(sys.executable).parent))
    assert exe is not None, "agentrl is not installed in this venv (pip install -e .)"
    proc = await asyncio.create_subprocess_exec(
        exe, *map(str, args), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    return await proc.wait()


async def measure(runs: int, work: Path) -> dict[str, Any]:
    checkpoint = write_checkpoint(work / "qwen2.5-7b-instruct")
    model = Model(load_tokenizer(str(checkpoint)))
    engine = await start_engine(model.tok, model.click_then_finish())
    agent_run = run_agent(EXAMPLE_AGENT, work / "agent.log", "--token", TOKEN)
    agent = next(agent_run)
    rehearse_s, episodes_s, validate_s = [], [], []
    try:
        for i in range(runs):
            out = work / f"out-{i}"
            seconds, run = await timed(
                "-f", EXAMPLE, "--engine", engine.url, "--model-dir", checkpoint, "--data", DATA,
                "--agent-url", agent.url, "--out", out,
                env={"AGENTRL_HTTP_HEADER_0": f"Bearer {TOKEN}"},
            )  # fmt: skip
            if run.code != 0:
                raise SystemExit(f"the rehearsal failed (exit {run.code}):\n{run.out}{run.err}")
            report = json.loads((out / "report.json").read_text())
            assert len(report["episodes"]) == 8, report
            rehearse_s.append(seconds)
            episodes_s.append(float(report["seconds"]))
            seconds, code = await timed("validate", "-f", EXAMPLE, "--policy", POLICY)
            assert code == 0, "agentrl validate failed on the example"
            validate_s.append(seconds)
    finally:
        agent_run.close()
        await engine.stop()
    best = min(rehearse_s)
    return {
        "episodes": 8,
        "runs": runs,
        "rehearse_s": round(best, 3),
        "episodes_s": round(min(episodes_s), 3),
        "validate_s": round(min(validate_s), 3),
        "rehearse_vs_validate": round(best / min(validate_s), 2),
        "budget_s": BUDGET_S,
        "within_budget": best < BUDGET_S,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one run of each")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(measure(1 if args.quick else args.runs, Path(tmp)))
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:22} {value}")


if __name__ == "__main__":
    main()
