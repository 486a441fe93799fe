"""Stands in for slime's train.py, which needs GPUs: records the argv and env it was started
with, so a test can hand that argv to slime's own parser (tests/support/slime_upstream).

For the log-capture tests it can also act like a training driver, driven by env vars:
AGENTRL_TEST_TRAIN_PRINT (text printed to stdout, then stderr), AGENTRL_TEST_TRAIN_WAIT
(wait for SIGTERM; with "save", print a line on SIGTERM and exit 0 like a driver that
saves first) and AGENTRL_TEST_TRAIN_EXIT (exit code)."""

import json
import os
import signal
import sys

with open(os.environ["AGENTRL_TEST_RECORD"], "w", encoding="utf-8") as f:
    json.dump(
        {"argv": sys.argv, "env": dict(os.environ), "pid": os.getpid(), "ppid": os.getppid()}, f
    )

text = os.environ.get("AGENTRL_TEST_TRAIN_PRINT")
if text:
    print(f"stdout: {text}", flush=True)
    print(f"stderr: {text}", file=sys.stderr, flush=True)
wait = os.environ.get("AGENTRL_TEST_TRAIN_WAIT")
if wait:
    if wait == "save":

        def _save(signum, frame):
            print(f"got signal {signum}: saving, then exiting", flush=True)
            sys.exit(0)

        signal.signal(signal.SIGTERM, _save)
    print("training (waiting for SIGTERM)", flush=True)
    while True:
        signal.pause()
sys.exit(int(os.environ.get("AGENTRL_TEST_TRAIN_EXIT", "0")))
