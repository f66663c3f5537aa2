"""Reading eval rows (JSONL from reports.eval) and the statistics over them: grouping and
labels (rows), seed bands, bootstrap intervals and equal-token comparisons (bands), pass@k
coverage (passk), scaling-law fits (scaling). Pure functions over rows; no command line."""
