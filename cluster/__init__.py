"""Local Kubernetes API emulator: test equipment and the product's embedded local cluster.

It follows documented Kubernetes API semantics and rejects what a real apiserver rejects, with the same
HTTP status and similar messages, so that passing against it means passing against a cluster.
"""
