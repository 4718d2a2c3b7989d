"""Benchmarks: ``python -m bench`` prints one ``name=value`` line per figure."""
