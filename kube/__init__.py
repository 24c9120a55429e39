"""Kubernetes I/O: the API client, owner reads and their cache, informers, leader election, events, logging.

Everything here talks to the apiserver or the process's outside; decisions live in ``gang`` and ``controller``.
"""
