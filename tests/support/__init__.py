"""Helpers the test modules share: builders, clients, polling, the gang contract as documented.

Test modules import each other never, conftest never: what two of them need lives here (tests/test_layers.py).
"""
