"""Stands in for slime's train.py, which needs GPUs: records the argv and env it was exec'd
with, so a test can hand that argv to slime's own parser (tests/support/slime_upstream)."""

import json
import os
import sys

with open(os.environ["AGENTRL_TEST_RECORD"], "w", encoding="utf-8") as f:
    json.dump({"argv": sys.argv, "env": dict(os.environ), "pid": os.getpid()}, f)
