"""Scorers: process/outcome reward models, verifier rewards, value head, self-evaluation.

The scorer contract (Scorer, KEY, score_nodes) and path aggregation (last/min/prod/mean) are
the core's: search.scoring and search.aggregate. Importing rewards.scorers registers this
package's scorers there (search.plugins does it on first need).
"""
