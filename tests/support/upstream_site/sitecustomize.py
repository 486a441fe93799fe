"""Runs at interpreter start when this directory is on PYTHONPATH (test support).

With AGENTRL_UPSTREAM_ROOTS set (paths joined by os.pathsep), slime, Megatron-LM and SGLang
import from those source trees, with stand-ins for their GPU stack (`upstream_imports`).
The launcher tests put this directory on the fake pod's PYTHONPATH, so the launcher's own
probe builds slime's real argument parser.
"""

import os

if os.environ.get("AGENTRL_UPSTREAM_ROOTS"):
    import upstream_imports

    upstream_imports.install(os.environ["AGENTRL_UPSTREAM_ROOTS"].split(os.pathsep))
