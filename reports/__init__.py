"""Evaluation runners, benchmarks and plots."""
