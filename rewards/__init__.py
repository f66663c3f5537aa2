"""Scorers: process/outcome reward models, verifier rewards, and their aggregation."""

from rewards.aggregate import AGGREGATES, last, mean, min, prod
from rewards.base import KEY, Scorer, score_nodes

__all__ = ["AGGREGATES", "KEY", "Scorer", "last", "mean", "min", "prod", "score_nodes"]
