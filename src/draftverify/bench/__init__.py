"""Benchmarks and evaluation: each prints JSON and a table, measured against a baseline in the same run."""
