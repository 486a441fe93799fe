"""`python benchmarks/signal.py [--json] [--quick]`: the GRPO signal benchmark (grpo_signal.py).

The benchmark's documented name. Every script in benchmarks/ runs with this folder first on
sys.path, so `import signal` (asyncio does it) finds this file before the standard library's
module: imported under that name, this file loads the standard library's `signal` and hands
it over in sys.modules (the import system returns what sys.modules holds after the module
ran), so no script here ever sees anything but the real one. Run as a script, it runs the
benchmark in benchmarks/grpo_signal.py.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import sysconfig


def _standard_library_signal() -> None:
    stdlib = [sysconfig.get_paths()["stdlib"]]
    spec = importlib.machinery.PathFinder.find_spec("signal", stdlib)
    assert spec is not None and spec.loader is not None, "no signal module in the stdlib"
    module = importlib.util.module_from_spec(spec)
    sys.modules["signal"] = module
    spec.loader.exec_module(module)


if __name__ == "signal":
    _standard_library_signal()
elif __name__ == "__main__":
    from grpo_signal import main

    main()
