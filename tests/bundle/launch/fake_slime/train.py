"""Stands in for slime's train.py: records the argv and env it was exec'd with."""

import json
import os
import sys

with open(os.environ["AGENTRL_TEST_RECORD"], "w", encoding="utf-8") as f:
    json.dump({"argv": sys.argv, "env": dict(os.environ), "pid": os.getpid()}, f)
