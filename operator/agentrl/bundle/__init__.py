"""Code that runs inside the Ray cluster: launch, rollout, gateway, traces, metrics."""
