"""The example HTTP agent (examples/agents/http_agent.py) with one mistake a row can ask for.

Run as its own process by the rehearsal tests: `python mistaken_agent.py <port>`. A row's
`metadata.mistake` picks what goes wrong; without one, the episode is the example's own:
- `string_reward`: plays the episode, then sends its reward as the string "1.0";
- `ignores_base_url`: never calls the model it was handed, and reports reward 1.0;
- `nan_reward`: plays the episode, then sends its reward as NaN (Python's `json.dumps`
  writes the bare token `NaN`, which no JSON parser is bound to accept);
- `slow`: waits `SLOW_S` seconds, then plays the episode (longer than a 1-second
  `timeoutSeconds`).
(The other mistakes a rehearsal names are not the agent's: a tool-call format the spec does
not parse, a callback URL out of reach, a context too small; the tests set those up.)
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "agents"))
import http_agent

honest_play = http_agent.play
SLOW_S = 1.5


async def play(row: dict[str, Any], http: aiohttp.ClientSession) -> dict[str, Any]:
    mistake = row.get("mistake")
    if mistake == "ignores_base_url":
        return {"rewards": 1.0}
    if mistake == "slow":
        await asyncio.sleep(SLOW_S)
    result = await honest_play(row, http)
    if mistake == "string_reward":
        return {"rewards": str(float(result["rewards"]))}
    if mistake == "nan_reward":
        return {"rewards": float("nan")}
    return result


http_agent.play = play  # the Agent looks `play` up in its module at each episode

if __name__ == "__main__":
    web.run_app(
        http_agent.Agent(None).app(), host="127.0.0.1", port=int(sys.argv[1]), access_log=None
    )
