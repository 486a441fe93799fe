"""A render worker process: renders prompts to token ids for the gateway, off its event loop.

Rendering is CPU-bound Python (the `renderers` package walks every token) plus a tokenizer
call that holds the GIL, so a thread would stall the event loop that serves every other
session; a separate process at the idle scheduling policy does not. It takes that policy
once it has loaded the tokenizer, before it tells the gateway it is ready
(`lower_priority`): jobs are what must not compete with the event loop, while the load is a
one-off per worker that, at the idle policy on a CPU saturated by other work, could get no
time at all, so the start timed out and prompts rendered on the event loop instead
(`render_pool.RenderPool.down`). The gateway (`render_pool.RenderPool`) starts these with
`python -m agentrl.bundle.gateway.render_worker` and talks to each over its stdin/stdout, one
job at a time:

    frame   = u32 header length, u32 payload length (big-endian), header (JSON), payload
    config  = {"tokenizer_path", "renderer_family", "tool_call_parser", "reasoning_parser",
               "hub_answer"} -> {"ok": true} once loaded, or {"ok": false, "error"}
              (with a hub_answer, a hub id's tokenizer comes from the cache, the hub unasked)
    render  = {"op": "render", "messages", "tools", "continue_final"}
              -> {"ok": true, "n"} + ids (int32, native order) (`prompt_ids`)
    bridge  = {"op": "bridge", "prompt_len", "messages", "tools"} + prompt + completion ids
              -> {"ok": true, "refused": true} (the renderer cannot bridge) or
                 {"ok": true, "suffix": true, "n"} + the ids after prompt + completion, or
                 {"ok": true, "n"} + all ids when they do not extend prompt + completion
    failure = {"ok": false, "error": "<type>: <message>"} (the input could not be rendered)

A reply may carry "retire": true: the worker grew past its memory budget and exits after
replying; the pool starts a fresh one when it needs it. The worker exits when its stdin
closes (the gateway went away).
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from array import array
from typing import Any, BinaryIO

import orjson

from agentrl.bundle.gateway.memory import release_now

FRAME = struct.Struct(">II")
RETIRE_RSS_BYTES = 1 << 30  # after a job leaves the worker above this, it exits and is replaced
TRIM_AFTER_TOKENS = 1 << 18  # after a job this large, hand freed memory back to the OS
NICE = 19  # where SCHED_IDLE is refused: the lowest priority nice gives


def write_frame(out: BinaryIO, header: dict[str, Any], payload: bytes = b"") -> None:
    data = orjson.dumps(header)
    out.write(FRAME.pack(len(data), len(payload)) + data + payload)
    out.flush()


def read_frame(inp: BinaryIO) -> tuple[dict[str, Any], bytes] | None:
    head = inp.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    n_header, n_payload = FRAME.unpack(head)
    header = orjson.loads(inp.read(n_header))
    payload = inp.read(n_payload) if n_payload else b""
    return header, payload


def ids_bytes(ids: list[int]) -> bytes:
    return array("i", ids).tobytes()


def prompt_ids(
    renderer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    continue_final: bool = False,
) -> list[int]:
    """The ids the model continues from: the messages and the generation prompt; or, with
    `continue_final` (the last message is the start of the assistant's reply, Anthropic's
    prefill), the messages rendered up to the end of that reply's text, as a chat template's
    `continue_final_message` does: the closed turn without what closes it (the stop token and
    anything the model does not sample after it)."""
    if not continue_final:
        ids: list[int] = renderer.render_ids(messages, tools=tools, add_generation_prompt=True)
        return ids
    rendered = renderer.render(messages, tools=tools, add_generation_prompt=False)
    ids = list(rendered.token_ids)
    owner, sampled = rendered.message_indices, rendered.sampled_mask
    stops = set(renderer.get_stop_token_ids())
    last, end = len(messages) - 1, len(ids)
    while end and (owner[end - 1] != last or not sampled[end - 1] or ids[end - 1] in stops):
        end -= 1
    return ids[:end]


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Worker:
    def __init__(self, renderer: Any) -> None:
        self.renderer = renderer

    def handle(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        op = header.get("op")
        tools = header.get("tools") or None
        if op == "render":
            ids = prompt_ids(
                self.renderer, header["messages"], tools, bool(header.get("continue_final"))
            )
            return {"ok": True, "n": len(ids)}, ids_bytes(ids)
        if op == "bridge":
            prev = array("i")
            prev.frombytes(payload)
            previous = prev.tolist()
            split = int(header["prompt_len"])
            bridged = self.renderer.bridge_to_next_turn(
                previous[:split], previous[split:], header["messages"], tools=tools
            )
            if bridged is None:
                return {"ok": True, "refused": True}, b""
            ids = list(bridged.token_ids)
            if ids[: len(previous)] == previous:
                suffix = ids[len(previous) :]
                return {"ok": True, "suffix": True, "n": len(suffix)}, ids_bytes(suffix)
            return {"ok": True, "n": len(ids)}, ids_bytes(ids)
        return {"ok": False, "error": f"unknown op {op!r}"}, b""

    def serve(self, inp: BinaryIO, out: BinaryIO) -> None:
        while (frame := read_frame(inp)) is not None:
            try:
                reply, data = self.handle(*frame)
            except Exception as exc:  # the agent's input; the gateway answers 400
                reply, data = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}, b""
            tokens = len(data) // 4
            if tokens >= TRIM_AFTER_TOKENS:
                release_now()
            retire = _rss_bytes() > RETIRE_RSS_BYTES
            if retire:
                reply["retire"] = True
            write_frame(out, reply, data)
            if retire:
                return


def lower_priority() -> None:
    """Run on CPU the event loop leaves: SCHED_IDLE (Linux), else nice. A woken event loop
    preempts an idle-policy task at once, where a niced one first finishes its time slice:
    at nice 10 a prompt at the size limit doubled other sessions' p99, at SCHED_IDLE it adds
    half (benchmarks/gateway_fairness.py). Under a saturated CPU a large prompt waits; the
    small turns of every other session do not."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.nice(NICE)


def main() -> None:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but frames on the pipe, whatever a library prints
    frame = read_frame(inp)
    if frame is None:
        return
    config, _ = frame
    told = config.get("hub_answer")
    try:
        from agentrl.bundle.gateway.hub import hub_told
        from agentrl.bundle.gateway.tokenizer import load_renderer

        # The gateway asked the hub at start; asking again cost each worker's first prompt
        # HF_HUB_ETAG_TIMEOUT where the hub is silent.
        with hub_told(told) if told is not None else contextlib.nullcontext():
            _, renderer = load_renderer(
                config["tokenizer_path"],
                config["renderer_family"],
                config.get("tool_call_parser"),
                config.get("reasoning_parser"),
            )
    except Exception as exc:
        write_frame(out, {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]})
        return
    lower_priority()  # before the first job can arrive: every job runs at the idle policy
    write_frame(out, {"ok": True})
    Worker(renderer).serve(inp, out)


if __name__ == "__main__":
    main()
