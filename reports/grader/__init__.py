"""The math grader's differential corpus (verifiers.math.verify against how each row was built
and against math-verify's recorded verdicts): the row type and keyed choices (rows), the
built families (families), answers written as models write them (styles), real model outputs
(samples), and the whole corpus (corpus). tests/test_grader_corpus.py and
reports.bench.grader read it."""
