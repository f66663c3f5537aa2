"""The code sandbox's parts, private to verifiers (its door is verifiers.code: run_tests).

In the caller's process:
  host.py     start a run's two processes (the program's sandbox and the judge), watch, reap
  files.py    what a run's sandbox may see: binds, masks of site-packages' data, work dirs
  image.py    the read-only image on a tmpfs the sandbox reads instead of host files
  asserts.py  which tests may share a program process: runs whose calls no verdict changes
  verdict.py  how a run ended: a report's run-level error
Sent as source to the two processes and exec'd there (never imported by them):
  seccomp.py  the seccomp allowlist every sandbox process installs last
  confine.py  namespaces, Landlock, capabilities, die-with-parent (before anything else runs)
  wire.py     the plain-data format between the program and the judge
  runner.py   the untrusted side: run the program, answer the judge's calls
  judge.py    the trusted side: run the tests (or stdin cases) against the program, report
"""
