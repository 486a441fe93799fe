"""The kopf operator: the only layer that talks to the Kubernetes API."""
