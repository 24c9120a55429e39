"""The emulator's controllers: the interface and shared helpers (``base.py``), the built-in controllers any kind
needs (``job.py``, ``statefulset.py``) and the table of them plus every registered kind's operators
(``table.py``); the operators themselves live in ``workloads/<kind>/emulator.py``."""
