"""Issue 32, held out: phrasings of the conclusion families written after the fix passed the
families in tests/test_grader_conclusions.py, in six rounds (adverbs, hedges, suppositions,
corrections, compounds, markers, bases and percents in new words; ordinary outputs that must
still pass; long reasoning that checks itself; LaTeX without delimiters). Each round was run against the grader before
any change for it; the rows it got wrong were fixed in the grader, not in the table (two
contested rows are left out, README "Math grading" names them).
"""

from __future__ import annotations

import pytest
from test_grader_conclusions import judged

from verifiers import verify

T, F = True, False
# fmt: off
# a model's reasoning that checks itself before it concludes (the fifth round below)
LONG_COT = ("Let me think. Janet has 16 eggs per day. She eats 3 for breakfast, so 16 - 3 = 13. "
            "She bakes muffins with 4, so 13 - 4 = 9. She sells 9 eggs at $2 each, so 9 * 2 = 18.\n\n"
            "Wait, let me double-check: 3 + 4 = 7, 16 - 7 = 9, 9 * 2 = 18. Yes.\n\n")
# further phrasings of every family, written after the families above passed (a held-out
# check of the fix, kept): ordinary outputs that must still pass are among them
NEW_PHRASINGS = [
    # adverbs
    *judged(r"Hence, the answer is precisely $\dfrac{7}{2}$.", r"\frac{7}{2}", "2"),
    *judged(r"The answer is thus $3\sqrt{2}$ units.", r"3\sqrt{2}", "2"),
    *judged(r"Therefore the final answer is actually $\frac{\pi}{4}$.", r"\frac{\pi}{4}", "4"),
    *judged(r"The probability is therefore $\frac{1}{6}$.", r"\frac{1}{6}", "6"),
    *judged(r"The answer, therefore, is $\frac{1}{6}$.", r"\frac{1}{6}", "6"),
    *judged(r"The answer is therefore \(2^{12}\).", "4096", "12"),
    ("3", r"The answer is then $\sqrt{3}$", F),
    ("3", r"The answer is evidently $x=\frac{1}{3}$.", F),
    # hedges
    *judged("The answer is $10$, though it might be $12$ depending on interpretation.", None, "10", "12"),
    ("10", r"My answer: \boxed{10}. (It could be 12 if repetitions are allowed.)", F),
    ("10", r"\boxed{10}, possibly \boxed{12}", F),
    *judged("I think it's 10, or maybe 12.", None, "10", "12"),
    ("10", "The answer is 10 or 12.", F),
    ("10", "Final Answer: 10 (or perhaps 12)", F),
    *judged("The answer is most likely 10, but 12 is also possible.", None, "10", "12"),
    ("10", "The answer is 10. Alternatively, it could be 12.", F),
    ("10", "The answer should be 10; however, it may also be 12.", F),
    ("10", "Either 10 or 12 is the answer.", F),
    ("10", "The answer is 10. Then again, it might be 12.", F),
    ("10", "I'm not sure whether the answer is 10 or 12.", F),
    ("10", "So the answer is $10$ (or $12$, if we include the endpoints).", F),
    ("10", "The answer is 10, but I'm not certain; it might be 12.", F),
    # conditionals/questions/quotes
    *judged("If the answer were 7, the sum would be 21, which is too small; hence the answer is 9.", "9", "7"),
    *judged("Assume the answer is 7. Then 3*7 = 21 < 27. So the answer is 9.", "9", "7"),
    *judged("Could the answer be 7? Checking: 3*7 = 21, not 27. The answer is 9.", "9", "7"),
    *judged('A common mistake is to say "the answer is 7". The correct answer is 9.', "9", "7"),
    ("7", "If the answer is 7, then 3*7 = 21.", F),
    ("7", "Is the answer 7?", F),
    *judged("The answer isn't 7. It's 9.", "9", "7"),
    ("7", "What if the answer is 7?", F),
    # corrections
    *judged(r"The answer is $\boxed{7}$.\n\nWait, I made a mistake: $3 \times 3 = 9$, not 7. So the answer is $\boxed{9}$.", "9", "7"),
    *judged("The answer is 7.\nHmm, let me recompute: 4 + 5 = 9. So the answer is 9.", "9", "7"),
    *judged("So we get 7. That's not right, since 4 + 5 = 9. Therefore we get 9.", "9", "7"),
    *judged(r"\boxed{7}... no wait, correcting the sum: \boxed{9}", "9", "7"),
    *judged("#### 7\nActually, recounting gives 9.\n#### 9", "9", "7"),
    *judged("The answer is 7. On second thought, it is 9.", "9", "7"),
    ("7", "The answer is 7. Let me verify: 7 + 2 = 9 and 9 - 2 = 7. Correct.", T),
    # conclusion verbs
    ("9", "Recomputing, the total comes to 9.", T),
    ("9", "Putting it all together yields 9.", T),
    ("9", "Thus there are 9 ways.", T),
    ("9", "Which gives us a final count of 9.", T),
    # compounds
    *judged("The trip takes 2 hours and 15 minutes.", "2.25", "2", "15", "135"),
    *judged("He is 5 feet 3 inches tall.", "5.25", "3"),
    ("12.75", "The total is $12 and 75 cents.", T),
    *judged("The total is 12 dollars and 75 cents.", None, "12", "75"),
    *judged("The answer is 1 hour 30 minutes.", ("1.5", "90 minutes"), "90"),
    *judged("#### 7 hours and 30 minutes", "7.5", "7"),
    *judged(r"\boxed{3 \text{ hours } 30 \text{ minutes}}", "3.5", "3"),
    ("3", r"\boxed{3 \text{ hours and } 30 \text{ minutes}}", F),
    # markers
    *judged("**Answer:** 18\n\nLet me recheck. 5 * 4 = 20.\n\n#### 20", "20", "18"),
    *judged("Answer: 18\n...\nFinal Answer: The final answer is 20. I hope it is correct.", "20", "18"),
    ("20", "The answer is 20. I hope this answer is right.", T),
    ("20", "The answer is 20.\nI'm confident the answer is correct.", T),
    ("20", "The answer is 20. I believe the answer is accurate.", T),
    # bases / percents
    ("101", "$101_2$", F),
    ("101", "The answer is $101_{2}$.", F),
    ("101_2", "101", T),
    ("25", r"The answer is $2500\%$.", F),
    ("40", r"The percentage is 40\%.", T),
    ("0.4", "40%", T),
    ("4", "400%", F),
    ("50", "0.5", F),
    # ordinary outputs that must keep working
    ("18", "Janet has 16 eggs. She eats 3 and bakes 4, leaving 9. She sells them at $2 each: 9 * 2 = $18.\nThe answer is 18.", T),
    ("18", "So Janet makes $18 every day at the farmers' market.", T),
    ("18", "Janet makes 9 * $2 = $<<9*2=18>>18.\n#### 18", T),
    (r"\frac{1}{4}", r"Therefore, the probability is $\boxed{\frac{1}{4}}$.", T),
    ("5", "Let me verify: if x = 5, then 2x + 1 = 11. ✓\n\nThe answer is $\\boxed{5}$.", T),
    ("5", "We test x = 4: 9 ≠ 11. We test x = 5: 11 = 11. So x = 5.", T),
    ("5", "**Step 1:** Set up 2x+1=11.\n**Step 2:** x=5.\n\n**Answer:** 5", T),
    ("5", r"The final answer is $\boxed{5}$. I hope it is correct.", T),
    ("5", "Final Answer: The final answer is 5. I hope it is correct.", T),
    ("12", "The area is 12 square units. If the side were doubled, the area would be 48.", T),
    ("3", "Is it possible to have more than 3? No. Hence the maximum is 3.", T),
    ("3", r"The maximum is $\boxed{3}$. Could there be more? No, since 4 would violate the condition.", T),
    ("3", "\\boxed{3}\n\nNote: if we allowed repeats, there would be 6.", T),
    ("7", "The answer is $7$.\n\nAlternatively, one can count complements: 10 - 3 = 7.", T),
    ("7", "Answer: 7 (since 10 - 3 = 7)", T),
    *judged("The answer is 7 apples, not 8.", "7", "8"),
    (r"\sqrt{2}", r"The side length is therefore $\sqrt{2}$, or about $1.414$.", T),
    (r"\sqrt{2}", r"The answer is $\sqrt{2} \approx 1.414$.", T),
    ("0.5", r"The answer is $\frac{1}{2}$ or 0.5.", T),
    *judged("So x = 5 or x = -3, but x must be positive, so x = 5.", "5", "-3"),
    ("4", "Wait, let me double check. 2^4 = 16 > 10, and 2^3 = 8 < 10, so n = 4.", T),
    *judged("I initially thought 12, but recounting carefully gives 16.", "16", "12"),
    ("16", "The answer is $\\boxed{16}$.\n\nWait, let me verify this. 4 × 4 = 16. Yes, it's correct.", T),
    ("16", "The answer is $\\boxed{16}$.\n\nHmm, let me double-check: 4 + 4 + 4 + 4 = 16. Confirmed.", T),
    # new hedge phrasings
    ("16", "I'd say 16, though 17 is defensible.", F),
    ("16", "The answer is 16 (maybe 17).", F),
    ("16", "The answer is 16, give or take — possibly 17.", F),
    ("16", "The answer is 16 or, if you count the endpoints, 18.", F),
    ("16", "**Answer:** 16 (alternatively 18, depending on convention)", F),
    ("16", r"\boxed{16} \text{ or } \boxed{18}", F),
    ("16", "Answer: $16$ / $18$", F),
    *judged("The answer is 16. Or possibly 18.", None, "16", "18"),
    ("16", "I am torn between 16 and 18.", F),
    ("16", "Final answer: 16? Or 18?", F),
    # new conditional phrasings
    *judged("Had the answer been 16, the total would be 48. It is 54, so the answer is 18.", "18", "16"),
    ("16", "If we assume the answer is 16, we get a contradiction.", F),
    ("16", "Let's check whether the answer is 16: 16*3 = 48 ≠ 54.", F),
    ("18", "Let's check whether the answer is 16: 16*3 = 48 ≠ 54. So the answer is 18.", T),
    # new correction phrasings
    *judged("Thus \\boxed{16}.\n\nHold on, I miscounted the eggs. Redoing the count: \\boxed{18}.", "18", "16"),
    *judged("The answer is 16.\n\nCorrection: the answer is 18.", "18", "16"),
    *judged("So the result is 16... no wait, I forgot to add the 2 from before, so it's 18.", "18", "16"),
    ("18", "16? No — 18.", T),
    ("16", "The answer is 16. Hmm, that doesn't seem right.", F),
    ("16", "The total is 16. That can't be right.", F),
    # compound phrasings
    *judged("She works 3 hours 45 minutes.", "3.75", "3", "45"),
    *judged("The board is 6 ft 6 in long.", "6.5", "6"),
    *judged("2 pounds 8 ounces", "2.5", "2"),
    *judged("It took him 4 and a half hours.", "4.5", "4"),
    *judged("It is 1 hour and 15 minutes long.", "1.25", "75"),
    # adverb family, more forms
    *judged(r"**The answer is therefore** $\frac{14}{3}$.", r"\frac{14}{3}", "3"),
    *judged(r"The answer is therefore: $$\frac{14}{3}$$", r"\frac{14}{3}", "3"),
    *judged(r"The answer is therefore \[\frac{14}{3}\]", r"\frac{14}{3}", "3"),
    ("6", r"The answer is, as computed above, $\frac{\pi}{6}$.", F),
    ("3", r"The answer is surely $\sqrt{3}$!", F),
    *judged(r"Hence the answer is $\log_2 8$.", "3", "2", "8"),
    ("5", "The answer is therefore $x^5$.", F),
    *judged(r"The answer is thus $\binom{5}{2}$.", "10", "2"),
    ("4", r"The answer is $\frac{14}{3}$ since 4 < 14/3 < 5.", F),
    # hedges, more forms
    ("16", "ANSWER: 16 (could also be 18)", F),
    *judged("Final answer: 16\nAlternatively: 18", None, "16", "18"),
    *judged("The answer is likely 16, but 18 can't be ruled out.", None, "16", "18"),
    ("16", "Answer: 16. (Possibly 18.)", F),
    ("16", "My best guess is 16, but I'd also accept 18.", F),
    ("16", r"$\boxed{16}$, or $\boxed{18}$ if order matters", F),
    ("16", r"The answer is $\boxed{16}$ (although it might be $\boxed{18}$).", F),
    ("16", "Answer: 16 (if order matters: 18)", F),
    # not stated
    ("16", "Suppose the answer were 16.", F),
    ("16", "Assume for contradiction that the answer is 16. Then 3 * 16 = 48, but we need 54.", F),
    ("18", "Assume for contradiction that the answer is 16. Then 3 * 16 = 48, but we need 54. Hence the answer is 18.", T),
    ("16", "The question asks: what is 4 * 4? Let me think. Is it 16?", F),
    ("16", "Someone might claim the answer is 16.", F),
    *judged("You might think it's 16, but it's actually 18.", "18", "16"),
    ("16", "It's not 16.", F),
    ("16", "The answer can't be 16.", F),
    *judged("The answer can't be 16, so it must be 18.", "18", "16"),
    # corrections
    *judged("=> 16\n\nNo wait, I need to add the two extra: => 18", "18", "16"),
    *judged("Total: 16. Hmm, I missed two. Total: 18.", "18", "16"),
    *judged(r"\[ \boxed{16} \]\nWait, that's incorrect because I forgot the 2 eggs. \[ \boxed{18} \]", "18", "16"),
    ("18", "#### 16\nI made an error: the correct count is 18.\n#### 18", T),
    *judged("The answer is 16. Wait — I double-counted. The answer is 18.", "18", "16"),
    ("16", "16. Wait, no. Let me redo this.", F),
    # markers
    ("18", "Answer: 16 is what we'd get without the bonus.\n\nWith the bonus, the total is 18.\n\n#### 18", T),
    *judged("**Answer**: 16\n\n---\n\nRevisiting step 2, the total is 18.\n\nThe final answer is 18", "18", "16"),
    ("18", "The answer is 18. I hope this answer is correct!", T),
    ("18", "The answer is 18.\n\nIs the answer correct? Yes.", T),
    ("18", "Therefore, 18. The answer is correct.", T),
    # compounds
    *judged("Answer: 5 hr 30 min", "5.5", "5"),
    ("16.5", r"\boxed{\$16 \text{ and } 50 \text{ cents}}", T),
    ("16", r"\boxed{16 \text{ dollars and } 50 \text{ cents}}", F),
    ("1.75", "one hour and 45 minutes", T),
    *judged("The movie lasts 5 hours, 30 minutes.", None, "5", "330"),
    # bases & percent
    *judged("$1010_2$", None, "1010", "10"),
    ("1010_2", "1010", T),
    *judged(r"30\%", ("30", "0.3")),
    ("30", r"3000\%", F),
    ("0.3", r"0.3\%", T),
    # a fourth round: corrections that look back, answers stated last, restatements
    *judged("The answer is 18. Wait, that's wrong. It's 16.", "16", "18"),
    ("18", "\\boxed{18}\n\nWait, I think I made a mistake. Let me recompute: 6 * 3 = 18. Actually, \\boxed{18} is correct.", T),
    *judged("The answer is 18 (not 16).", "18", "16"),
    ("18", "It cannot be 16 because 16 is even, so the answer is 18.", T),
    *judged("Assuming the answer is 16, we get a contradiction; therefore the answer is 18.", "18", "16"),
    *judged("The answer is 18. (Earlier I wrote 16 by mistake.)", "18", "16"),
    ("18", "So the answer should be 18.", T),
    ("18", "The answer would be 18.", T),
    ("18", "Hence, we conclude the answer equals 18.", T),
    ("18", r"Therefore, $\boxed{18}$ is the answer.", T),
    ("18", "18 is the answer.", T),
    ("16", "18 is the answer, not 16.", F),
    ("18", "My final answer: **18**", T),
    ("18", r"**Final Answer:** $\boxed{18}$", T),
    ("18", "Final answer\n\n18", T),
    ("18", "The answer: 18 apples", T),
    ("18", "ANSWER: 18", T),
    ("18", "answer = 18", T),
    ("18", "So, the final answer is 18 dollars and 0 cents.", T),
    ("18", "The final answer is $\\boxed{18}$.\n\nAlternatively, one could set up the equation 3x = 54, giving x = 18.", T),
    ("18", "The final answer is $\\boxed{18}$.\n\nAlternatively, one could set up 3x = 48, giving x = 16.", T),
    *judged("We could also say the answer is 16, but the answer is 18.", "18", "16"),
    ("18", "Double-checking: 6 × 3 = 18. ✓ The answer is 18.", T),
    *judged("The answer is $3!$.", "6", "3"),
    ("3", "The answer is therefore $3!$.", F),
    *judged(r"The answer is therefore $\sqrt[3]{8}$.", "2", "3", "8"),
    ("5", "The answer is simply x = 5", T),
    *judged("Thus the answer is definitely $5$ (or $-5$ if negative values are allowed).", None, "5", "-5"),
    ("18", "The total cost is $18.", T),
    ("18", "She spends $6 + $12 = $18.", T),
    ("18", r"She spends \$6 + \$12 = \$18 in total.", T),
    *judged("It takes 2 h 30 min.", "2.5", "150"),
    *judged("First, 16. Then I realized I forgot the 2 extra. Final: 18.", "18", "16"),
    # a fifth round: long reasoning with checks and turns before the conclusion
    *judged(LONG_COT + "**Final Answer**\n\\[\n\\boxed{18}\n\\]", "18", "9"),
    ("18", LONG_COT + "So the answer is 18.", T),
    ("18", "<think>\nLet me think. Janet has 16 eggs per day. She eats 3 for breakfast, so 16 - 3 = 13. She bakes muffins with 4, so 13 - 4 = 9. She sells 9 eggs at $2 each, so 9 * 2 = 18.\n\nWait, let me double-check: 3 + 4 = 7, 16 - 7 = 9, 9 * 2 = 18. Yes.\n\nHmm, wait, is it 9? No, 9 eggs times $2 is 18.\n</think>\n\nJanet makes $\\boxed{18}$ dollars.", T),
    *judged(LONG_COT + r"Hmm, wait, is it 9? No, 9 eggs times $2 is 18. The answer is $\boxed{18}$.", "18", "9"),
    ("18", "16 - 3 - 4 = 9 eggs. 9 * $2 = $18.\nThe answer is: 18", T),
    *judged("First she has 16 - 3 = 13 eggs. Wait, she also uses 4, so 13 - 4 = 9. Then 9 * 2 = 18.\n#### 18", "18", "13"),
    *judged(r"We get \boxed{26}. Wait, I subtracted wrong: 16 - 3 - 4 = 9, and 9 * 2 = 18. So the answer is \boxed{18}.", "18", "26"),
    *judged("We get 26. Wait, I subtracted wrong: 16 - 3 - 4 = 9, and 9 * 2 = 18.", "18", "26"),
    *judged("The answer is 26.\n\nActually, hold on. I double counted. The correct total is 18.", "18", "26"),
    *judged("Answer: 26. Hmm, no—she only sells 9 eggs, so the answer is 18.", "18", "26"),
    ("18", r"The answer is $\boxed{18}$. This matches our estimate since 9 eggs at $2 = $18.", T),
    ("18", "$\\boxed{18}$\n\nExplanation: 16 - 3 - 4 = 9; 9 × 2 = 18.", T),
    *judged(LONG_COT + "So the answer is 18, though if she also sold the muffins it could be 24.", None, "18", "24"),
    ("18", LONG_COT + r"\boxed{18} or \boxed{24}", F),
    ("18", LONG_COT + "I'm not sure if it's 18 or 24.", F),
    # a sixth round: LaTeX written without delimiters, units and signs in plain answers
    *judged("The answer is 5^{2} = 25.", "25", "5"),
    (r"\frac{1}{2}", r"Therefore the answer is \frac{1}{2}", T),
    *judged(r"Therefore the answer is \dfrac{1}{2}.", r"\frac{1}{2}", "2"),
    *judged(r"So x = \frac{1}{2}.", r"\frac{1}{2}", "2"),
    *judged(r"Thus the length is 2\sqrt{3}.", r"2\sqrt{3}", "3", "2"),
    ("90", r"The angle is 90^\circ.", T),
    ("40", r"The discount is 40\%.", T),
    ("15", r"The area is 15 \text{ cm}^2.", T),
    ("1000", "The total is 1,000.", T),
    *judged("The answer is -3.", "-3", "3"),
    ("0.5", "The answer is .5", T),
    *judged("The answer is $x^2+1$.", "x^2+1", "2"),
    ("10", "There are 10 ways.", T),
    *judged("So, 4! = 24.", "24", "4"),
]
# fmt: on


@pytest.mark.parametrize("gold, prediction, expected", NEW_PHRASINGS)
def test_new_phrasing(gold: str, prediction: str, expected: bool) -> None:
    verdict = verify(gold, prediction)
    assert verdict.correct is expected, verdict


def test_the_phrasings_can_fail() -> None:
    assert sum(not e for *_, e in NEW_PHRASINGS) >= 0.4 * len(NEW_PHRASINGS)
