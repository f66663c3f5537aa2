"""Aggregating per-step rewards into one path score: the core's functions (search.aggregate),
re-exported where scorer code has always found them."""

from search.aggregate import AGGREGATES, Aggregate, get, last, mean, min, prod

__all__ = ["AGGREGATES", "Aggregate", "get", "last", "mean", "min", "prod"]
