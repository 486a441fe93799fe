"""The `agentrl` command line: render, validate and crd, without a cluster."""
