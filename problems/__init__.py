"""Problems for the search: benchmark loaders and seeded procedural generators.

    problems.load("gsm8k", limit=100)            # benchmark Problems with gold answers
    problems.arith.generate(500, seed=1)         # multi-step arithmetic word problems
    problems.codegen.generate(200, seed=1)       # small program-synthesis tasks
    problems.apps.load("apps_test.jsonl")        # APPS-format stdin/stdout problems
"""

from problems import apps, arith, codegen
from problems.datasets import DATA_ENV, data_dir, load, names

__all__ = ["DATA_ENV", "apps", "arith", "codegen", "data_dir", "load", "names"]
