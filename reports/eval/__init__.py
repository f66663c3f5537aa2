"""The eval runner: a grid of problems x algorithms x budgets x seeds (grid) run through
search.solve, one graded (correctness) JSON line per run appended and fsynced to a resumable runs
file (cells), here (sweep: `python -m reports.eval`) or on Ray workers (ray_workers), with a
progress bar (grid_progress)."""
