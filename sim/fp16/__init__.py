"""float16 facts: exact counts of what float16 does to values at any loss scale."""
