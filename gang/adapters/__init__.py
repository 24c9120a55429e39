"""Workload adapters: the interface (``base.py``) and the table of every registered kind's adapters
(``table.py``); the adapters themselves live in ``workloads/<kind>/adapter.py``."""
