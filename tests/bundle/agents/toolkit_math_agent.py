"""A math agent built on agentcore-rl-toolkit, run by the AgentCore tests as its own process.

Shaped like the toolkit's own example (examples/strands_math_agent/rl_app.py: an
`AgentCoreRLApp` whose `@app.rollout_entrypoint` asks the model through the `base_url`,
`model_id` and `api_key` it finds in `_rollout`, scores the answer after "####" against the
row's `answer`, and returns `{"rewards": ...}`), with a plain OpenAI client instead of
Strands. The toolkit's decorator does the rest: it checks `_rollout`, answers
`{"status": "processing", ...}` at once, and writes the result (or the error) to S3.

The row's `behaviour` picks a failure: `raise` (the handler raises), `report_error` (it
returns a failure status itself), `stall` (it never finishes, so no result appears).

Run: `python toolkit_math_agent.py <port>`; S3 is wherever `AWS_ENDPOINT_URL_S3` points.
"""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any

from agentcore_rl_toolkit import AgentCoreRLApp, RewardFunction
from openai import AsyncOpenAI


class FinalAnswerReward(RewardFunction):
    """1.0 when the number after the last "####" equals the ground truth, else 0.0."""

    def __call__(self, response_text: str = "", ground_truth: str = "", **_: Any) -> float:
        found = re.findall(r"#### (\-?[0-9\.\,]+)", response_text[-300:])
        return 1.0 if found and found[-1].replace(",", "") == ground_truth else 0.0


app = AgentCoreRLApp()
reward_fn = FinalAnswerReward()
SYSTEM = 'Solve the math problem step by step and give the final answer after "####".'


@app.rollout_entrypoint
async def invoke_agent(payload: dict[str, Any], context: Any) -> dict[str, Any]:
    behaviour = payload.get("behaviour", "solve")
    if behaviour == "raise":
        raise RuntimeError("calculator tool crashed")
    if behaviour == "stall":
        await asyncio.sleep(3600)
    rollout = payload["_rollout"]
    model = AsyncOpenAI(
        base_url=rollout["base_url"], api_key=rollout.get("api_key") or "EMPTY", max_retries=0
    )
    reply = await model.chat.completions.create(
        model=rollout["model_id"],
        messages=[
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": payload["prompt"]},
        ],
        **rollout.get("sampling_params", {}),
    )
    await model.close()
    text = reply.choices[0].message.content or ""
    if behaviour == "report_error":
        return {"rewards": 0.0, "status_code": 422, "stop_reason": "the judge rejected the answer"}
    return {"rewards": [reward_fn(response_text=text, ground_truth=str(payload["answer"]))]}


if __name__ == "__main__":
    app.run(port=int(sys.argv[1]), host="127.0.0.1")
