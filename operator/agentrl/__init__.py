"""agentrl: Kubernetes-native GRPO training of LLM agents on KubeRay and slime."""

__version__ = "0.1.0"
