"""Everything measured over the toolkit; nothing in search/, rewards/, verifiers/ or problems/
imports it. One folder per kind of work; a folder imports only those above it in this list
(tests/test_architecture.py checks it):

    analysis/   reading eval rows and the statistics over them (rows, seed bands and
                bootstrap intervals, pass@k, scaling fits); a library, no command line
    grader/     the math grader's differential corpus (built rows, styles, model samples)
    eval/       running grids: problems x algorithms x budgets x seeds -> resumable JSONL
                rows (`python -m reports.eval`), locally or on Ray, graded per run
    figures/    drawing rows and trees (plots, the HTML tree viewer, GraphML) and the demo's
                committed figures
    studies/    one question each, measured: from eval rows (A* vs best-of-N, the reference
                variants, fLaws, the compute-optimal table) or by their own runs (PRM bounds
                and judging, the sandbox's system calls)
    bench/      speed, each benchmark timing its ratios side by side in one run, and a soak of
                the code sandbox
    demo.py     the demo sweep (`make demo`), built from eval, analysis and figures
"""
