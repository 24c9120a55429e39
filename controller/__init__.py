"""Gate controller: decides when a whole gang fits and releases its scheduling gates."""
