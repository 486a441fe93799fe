"""The session-wide control plane (etcd + kube-apiserver) for every e2e test."""

from tests.support.kube import kube_harness

__all__ = ["kube_harness"]
