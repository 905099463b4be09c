"""A real local Kubernetes control plane (etcd + kube-apiserver, API aggregation enabled).

No Docker engine or image registry exists on the development machines, so kind cannot run.
This package builds kube-apiserver, kubectl and etcd with Go from the Go module proxy at pinned
versions, caches the binaries, and runs them on 127.0.0.1 with the flags API aggregation needs.
Tests, the demo and the benchmarks all start their cluster through :mod:`localcluster.cluster`.
"""
