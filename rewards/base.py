"""The scorer protocol shared by PRMs, ORMs and verifiers: the core's contract
(search.scoring), re-exported where scorer code has always found it."""

from search.scoring import KEY, Scorer, implicit, name, path_agg, score_nodes

__all__ = ["KEY", "Scorer", "implicit", "name", "path_agg", "score_nodes"]
