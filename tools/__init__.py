"""Maintainers' tools run from a clone (``make release``); not part of the installed package."""
