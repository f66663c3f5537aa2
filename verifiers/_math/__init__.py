"""The math grader's parts, private to verifiers (its doors are verifiers.math: extract_answer,
normalize, verify, and verifiers.steps: check_step).

Reading the answer (plain string work, no sympy):
  extract.py     which part of a text is its final answer (boxes, phrases, GSM8K's "####")
  phrases.py     the answer markers ("the answer is", "答案是", "Ответ:") and what each states
  conclusion.py  which stated answer is the conclusion: commitment, corrections, hedges
  sections.py    around it: check sections, refusals, a final marked line
  lexicon.py     the words of all that, one table per role, a line per language
  languages.py   which language a text is in, and its table words put in English
                 (languages/<code>.json: one table a language, 31 of them)
  doubt.py       when the conclusion is not read with confidence: the reasons to abstain
  layout.py      markdown tables, few-shot run-ons, a bold answer with an aside
  forms.py       how numbers are written (Unicode, regional groups, mixed numbers), rewritten first
  numwords.py    English number words ("forty-two")
  items.py       the math in a stretch of prose: spans, quantities, numbers, in order
  quantity.py    compound quantities ("5 hours and 30 minutes")
  choice.py      multiple-choice letters, a problem's options, and their verdict
Canonical forms:
  spelling.py    how an answer is spelled, down to one LaTeX string
  latex.py       LaTeX -> a canonical plain string
  exact.py       exact, bounded rational arithmetic on plain strings (shared with the step checker)
Equivalence, out of process:
  pool.py        sympy worker processes with a hard per-call timeout
  compare.py     math-verify's equivalence of two answers, run inside a worker
"""
