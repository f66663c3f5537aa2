"""Studies: each module answers one question from eval rows or its own measurement, and
prints (and often draws) the answer: why A* spends what it spends (astar), the reference
variants against their other setting (variants), resampling under an imperfect verifier
(flaws, flaws_rates), what bounds and what judges a learned PRM (prm_bounds, prm_eval), the
compute-optimal table's fit (compute_table), the sandbox's system calls (sandbox_syscalls)."""
