"""`python -m agentrl.bundle.launch`: the fixed entrypoint name the renderer uses."""

from agentrl.bundle.launch.main import main

raise SystemExit(main())
