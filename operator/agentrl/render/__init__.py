"""Pure builders: a validated RLExperiment plus operator defaults -> Kubernetes objects."""
