"""The SQL read model: effective capacity, reservations and their history."""
