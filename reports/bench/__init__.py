"""Benchmarks: each measures its targets as ratios taken side by side in one run (never a
timed unit test): the engine's tree expansion (engine, llamacpp), eval grids at concurrency
1 and N (eval), where the forwards' thread spends a grid (host) and one merged forward alone
(forward), speculative decoding (spec), a solve beside a busy neighbour (threads), the
command line end to end (cli), the math grader (grader), the code sandbox against an earlier
one (sandbox) and a soak of it that checks what runs leave behind (soak_sandbox)."""
