"""Training a PRM from rollouts: labels against brute force on scripted trees, the first-error
definition on hand-made solutions, the trained checkpoint read by rewards.prm exactly as
training read it, resumable labelling and training, and the ProcessBench / best-of-N
figures of reports.studies.prm_eval on hand-computed cases."""

from __future__ import annotations

import json
import math

import pytest
import torch

from problems import arith
from reports.studies.prm_eval import Solution, best_threshold, first_error_f1, rerank, step_auc
from rewards.prm import HFPRM, MATH_SHEPHERD, declare_format, label_ids
from search.engines.fake import ScriptedEngine
from search.types import Node, Problem, Step
from training.prm_labels import (
    LabelConfig,
    LabelledPath,
    Labeller,
    label_problems,
    read_rows,
    spent,
)
from training.prm_train import Batches, build, encode, loss_and_scores, train

# -- a scripted policy whose rollouts finish: its right answer is 7 --------------------------
# Every path takes three steps. A path that has taken a step "bad" can only end wrong; one
# that has not ends right with probability RIGHT. So a step's true hard label is "no bad
# step so far", and its true soft value is RIGHT then, 0 after a bad step.
RIGHT = 0.5


def children(path: tuple[str, ...]) -> list[tuple[str, float]]:
    if len(path) < 2:  # two right steps, so completions find paths the samples missed
        return [("good\n\n", 0.3), ("fine\n\n", 0.3), ("bad\n\n", 0.4)]
    if len(path) == 2:
        if "bad\n\n" in path:
            return [("The answer is 8.", 1.0)]
        return [("The answer is 7.", RIGHT), ("The answer is 9.", 1 - RIGHT)]
    return []


class Rolling(ScriptedEngine):
    """The scripted engine with whole-solution rollouts (stop=None), as HFEngine gives
    them: one child holding every remaining step."""

    def expand(self, nodes, n=1, *, stop=("\n\n",), max_tokens=256, temperature=1.0,
               top_p=1.0, seed=0):
        if stop is not None:
            return super().expand(nodes, n, stop=stop, max_tokens=max_tokens,
                                  temperature=temperature, seed=seed)
        out = []
        for j, node in enumerate(nodes):
            kids = []
            for i in range(n):
                cur = node
                while not cur.finished:
                    cur = super().expand([cur], 1, temperature=temperature,
                                         seed=seed * 7919 + j * 131 + i * 17 + cur.depth)[0][0]
                text = "".join(s.text for s in cur.steps()[node.depth:])
                kids.append(Node(parent=node, step=Step(text, (1,), (0.0,), "eos")))
            out.append(kids)
        return out


PROBLEMS = [Problem(prompt=f"scripted {i}", id=f"s/{i}", answer="7") for i in range(3)]


def truth(path: LabelledPath) -> list[float]:
    seen_bad = False
    out = []
    for text in path.steps:
        seen_bad = seen_bad or text == "bad\n\n" or text.endswith(("8.", "9."))
        out.append(0.0 if seen_bad else 1.0)
    return out


@pytest.mark.parametrize("search", ["binary", "every"])
def test_hard_labels_match_the_tree(search):
    # k = 40 rollouts: a prefix with RIGHT = 1/2 misses every time with odds 2^-40
    cfg = LabelConfig(search=search, labels="hard", paths=6, completions=40)
    labeller = Labeller(Rolling(children), cfg, seed=3)
    paths = labeller.label(PROBLEMS)
    sampled, reused = paths[:18], paths[18:]
    assert {len(p.steps) for p in paths} == {3}
    assert any(p.correct for p in sampled) and any(not p.correct for p in sampled)
    for p in sampled:
        assert list(p.labels) == truth(p), p
        assert p.correct == (p.labels[-1] == 1.0)
    # completions kept as paths: every label they carry is true, none repeats a path
    assert reused and any(None in p.labels for p in reused)
    for p in reused:
        assert all(lab is None or lab == t for lab, t in zip(p.labels, truth(p))), p
        assert p.labels[-1] == float(p.correct)
    keys = [(p.problem_id, p.steps) for p in reused]
    assert len(set(keys)) == len(keys)
    assert not set(keys) & {(p.problem_id, p.steps) for p in sampled}
    off = Labeller(Rolling(children), LabelConfig(search=search, paths=6, completions=40,
                                                  reuse=False), seed=3).label(PROBLEMS)
    assert [p.row() for p in off] == [p.row() for p in sampled]


def test_binary_search_spends_fewer_rollouts_than_every_step():
    every, binary = (Labeller(Rolling(children), LabelConfig(search=s, labels="hard", paths=6,
                                                             completions=8), seed=1)
                     for s in ("every", "binary"))
    every.label(PROBLEMS)
    binary.label(PROBLEMS)
    assert 0 < binary.cost.rollouts < every.cost.rollouts


def test_soft_and_pav_labels_are_the_rollout_shares():
    k = 10
    cfg = LabelConfig(search="every", labels="soft", paths=4, completions=k)
    lab = Labeller(Rolling(children), cfg, seed=5)
    soft = lab.label(PROBLEMS[:1])
    for p in soft:
        for v in p.labels:
            assert v is not None and (v * k) == pytest.approx(round(v * k))  # a share of k
        after_bad = [v for i, v in enumerate(p.labels) if "bad\n\n" in p.steps[:i + 1]]
        assert all(v == 0.0 for v in after_bad)
        assert p.labels[-1] == float(p.correct)  # a finished step: its own grade
    pav = Labeller(Rolling(children), LabelConfig(search="every", labels="pav", paths=4,
                                                  completions=k, alpha=1.0), seed=5)
    for p in pav.label(PROBLEMS[:1]):
        assert all(v is not None and 0.0 <= v <= 1.0 for v in p.labels)
        # a bad step: q = 0, so q + (q - q_parent) <= 0 is clipped to 0
        for text, v in zip(p.steps, p.labels):
            if text == "bad\n\n":
                assert v == 0.0


def test_label_config_refuses_what_cannot_work():
    with pytest.raises(ValueError, match="hard labels only"):
        LabelConfig(search="binary", labels="soft")
    with pytest.raises(ValueError, match="labels must be"):
        LabelConfig(labels="bogus")
    with pytest.raises(ValueError, match=">= 1"):
        LabelConfig(completions=0)


def test_labelling_resumes_and_drops_a_torn_line(tmp_path):
    cfg = LabelConfig(paths=2, completions=4)
    out = tmp_path / "labels.jsonl"
    whole = tmp_path / "whole.jsonl"
    label_problems(Rolling(children), PROBLEMS, whole, cfg, seed=9, batch=1, progress=False)
    label_problems(Rolling(children), PROBLEMS[:2], out, cfg, seed=9, batch=1, progress=False)
    with out.open("a") as fh:
        fh.write('{"problem_id": "torn')  # a run killed mid-write
    assert {r["problem_id"] for r in read_rows(out)} == {"s/0", "s/1"}
    out.write_text("".join(json.dumps(r) + "\n" for r in read_rows(out)))
    cost = label_problems(Rolling(children), PROBLEMS, out, cfg, seed=9, batch=1,
                          progress=False)
    assert cost.rollouts > 0  # only the third problem was labelled again
    assert read_rows(out) == read_rows(whole)
    total = spent(out)  # both runs' batches: every problem once
    assert total["problems"] == 3 and total["seconds"] > 0
    assert total["rollouts"] == spent(whole)["rollouts"]


# -- the first erroneous step of an arith solution -------------------------------------------
def test_first_error_definition():
    p = arith.generate(1, seed=5, difficulty=5)[0]
    gold = p.metadata["solution"].split("\n\n")
    (a, op, b, c) = p.metadata["equations"][2]
    assert arith.first_error(p, gold) is None
    wrong_sum = gold[:2] + [gold[2].replace(f"= {c}", f"= {c + 1}")] + gold[3:]
    assert arith.first_error(p, wrong_sum) == 2
    # right arithmetic on a quantity of no correct derivation (an operand off by one)
    other = gold[:2] + [f"Noah has {a} {op} {b + 1} = {arith.apply(a, op, b + 1)} balloons."]
    assert arith.first_error(p, other) == 2
    a0, op0, b0, c0 = p.metadata["equations"][0]
    assert op0 == "*"  # commuted operands of * are the same quantities
    assert arith.first_error(p, [f"Noah has {b0} * {a0} = {c0} balloons."] + gold[1:]) is None
    assert arith.first_error(p, gold[:2] + [f"The answer is {p.answer}."]) == 2  # too early
    assert arith.first_error(p, gold[:-1]) == len(gold) - 2  # never states the answer
    assert arith.first_error(p, gold[:-1] + ["The answer is 1."]) == len(gold) - 1
    assert arith.first_error(p, [gold[0], "Noah thinks hard.", *gold[1:]]) == 1


# -- the checkpoint: rewards.prm reads it as training read it --------------------------------
def test_first_error_of_a_program_is_where_it_parts_from_the_reference():
    """A program's steps are its lines; line k errs when the sample's lines up to k and the
    reference's after it fail the hidden tests (run in the sandbox): a line written in other
    words is right, a wrong, dropped or extra stage errs where it stands."""
    from problems import codegen
    from training.evaluate import Grader, first_error

    p = codegen.generate(1, seed=90_005, difficulty=3)[0]
    lines = p.metadata["solution"][len(p.prompt):].splitlines(keepends=True)
    assert len(lines) == 4 and lines[1] == "    s = s.swapcase()\n"
    check = Grader()
    assert first_error(p, lines, check) is None
    same = [lines[0], "    s = ''.join(c.swapcase() for c in s)\n", *lines[2:]]
    assert first_error(p, same, check) is None
    assert first_error(p, [lines[0], "    s = s.upper()\n", *lines[2:]], check) == 1
    assert first_error(p, lines[:1] + lines[2:], check) == 1  # the stage dropped
    assert first_error(p, [*lines[:3], "    n = n + 1\n", lines[3]], check) == 3


def scored_by(prm: HFPRM, problem: Problem, steps) -> list[float]:
    """The PRM's scores of `steps` as a search asks for them: a chain of nodes."""
    node, nodes = Node(problem=problem, prompt_ids=(0,)), []
    for text in steps:
        node = Node(parent=node, step=Step(text, (0,), (0.0,), "stop"))
        nodes.append(node)
    return prm.score(problem, nodes)


def plain_forward_scores(model, tok, fmt, problem: Problem, steps) -> list[float]:
    """The reference: one plain forward over the formatted path, read at each step's tag."""
    ids, ends, _, _ = encode(tok, fmt, LabelledPath(problem.id, problem.prompt,
                                                    str(problem.answer), tuple(steps),
                                                    (1.0,) * len(steps), True))
    pair = label_ids(tok, fmt)
    assert pair is not None and len(ends) == len(steps)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    return [torch.softmax(logits[e, list(pair)], -1)[0].item() for e in ends]


@pytest.fixture(scope="module")
def small_prm(tmp_path_factory):
    model, tok = build("tiny-arith")
    out = tmp_path_factory.mktemp("prm")
    paths = [LabelledPath("p", "Tom has 5 apples. Tom buys 3 more apples. How many apples "
                          "does Tom have now?", "8",
                          ("Tom now has 5 + 3 = 8 apples.\n\n", "The answer is 8."),
                          (1.0, 1.0), True),
             LabelledPath("p", "Tom has 5 apples. Tom buys 3 more apples. How many apples "
                          "does Tom have now?", "8",
                          ("Tom now has 5 + 3 = 9 apples.\n\n", "The answer is 9."),
                          (0.0, None), False)]
    history = train(model, tok, MATH_SHEPHERD, paths * 4, paths, epochs=3, lr=2e-3,
                    batch_size=4, progress=False)
    model.eval().save_pretrained(out)
    tok.save_pretrained(out)
    declare_format(out, MATH_SHEPHERD)  # as the command saves it: a causal LM says its reading
    return model, tok, out, paths, history


def test_trained_checkpoint_scores_as_in_training(small_prm):
    model, tok, out, paths, history = small_prm
    assert history[-1]["loss"] < history[0]["loss"] + 1e-9 or history[0]["loss"] < 0.69
    prm = HFPRM.load(str(out))
    assert prm.fmt.family == "math_shepherd"
    problem = Problem(prompt=paths[0].prompt, id="p", answer="8")
    for path in paths:
        got = scored_by(prm, problem, path.steps)
        assert len(got) == len(path.steps)
        assert got == pytest.approx(plain_forward_scores(model, tok, MATH_SHEPHERD, problem,
                                                         path.steps), abs=1e-4)


def test_batches_pad_without_moving_positions(small_prm):
    model, tok, _, paths, _ = small_prm
    data = Batches(tok, MATH_SHEPHERD, paths)
    batch = next(data(range(2), 2))
    pair = label_ids(tok, MATH_SHEPHERD)
    assert pair is not None
    loss, scores, labels = loss_and_scores(model, batch, pair)
    assert labels.tolist() == [1.0, 1.0, 0.0]  # the None label is not read
    one = [loss_and_scores(model, next(data([i], 1)), pair)[1] for i in range(2)]
    assert scores.tolist() == pytest.approx(torch.cat(one).tolist(), abs=1e-5)
    assert math.isfinite(loss.item())
    # the LM loss: next-token cross-entropy on the step text (not the tags) of the path
    # that grades correct, against a plain forward of that path alone
    with_lm = loss_and_scores(model, batch, pair, lm_weight=1.0)[0]
    ids, _, _, text = encode(tok, MATH_SHEPHERD, paths[0])
    tag = set(tok(MATH_SHEPHERD.step_tag, add_special_tokens=False)["input_ids"])
    assert text and not {ids[t] for t in text} & tag
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0], -1)
    ce = -sum(logp[t - 1, ids[t]].item() for t in text) / len(text)
    assert (with_lm - loss).item() == pytest.approx(ce, abs=1e-4)


def test_training_resumes_from_its_checkpoint(tmp_path, small_prm, monkeypatch):
    import training.prm_train as pt

    _, _, _, paths, _ = small_prm
    (tmp_path / "whole").mkdir()
    whole = train(*build("tiny-arith"), MATH_SHEPHERD, paths * 2, paths, epochs=2, lr=1e-3,
                  batch_size=2, progress=False, work=tmp_path / "whole")
    assert whole[0]["loss"] != whole[1]["loss"]
    real, calls = pt.evaluate, []

    def killed_in_epoch_two(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the run dies after epoch 1's checkpoint
        return real(*args, **kwargs)

    monkeypatch.setattr(pt, "evaluate", killed_in_epoch_two)
    # a work folder that does not exist yet (as prm_train's drills/ under WORK) is made
    with pytest.raises(KeyboardInterrupt):
        train(*build("tiny-arith"), MATH_SHEPHERD, paths * 2, paths, epochs=2, lr=1e-3,
              batch_size=2, progress=False, work=tmp_path / "cut" / "drills")
    monkeypatch.setattr(pt, "evaluate", real)
    resumed = train(*build("tiny-arith"), MATH_SHEPHERD, paths * 2, paths, epochs=2, lr=1e-3,
                    batch_size=2, progress=False, work=tmp_path / "cut" / "drills")
    assert [h["loss"] for h in resumed] == pytest.approx([h["loss"] for h in whole], abs=1e-6)


# -- ProcessBench F1, AUC and reranking on hand-made solutions -------------------------------
def sol(problem, scores, first_error, correct, answer="1"):
    return Solution(problem, tuple(f"s{i}" for i in range(len(scores))), {"x": tuple(scores)},
                    answer, correct, True, first_error)


def test_first_error_f1_hand_computed():
    sols = [sol(0, [0.9, 0.2, 0.1], 1, False),   # predicted 1 at tau .5: right
            sol(0, [0.9, 0.8, 0.3], 1, False),   # predicted 2: wrong
            sol(0, [0.9, 0.9, 0.9], None, True),  # predicted none: right
            sol(0, [0.9, 0.4, 0.9], None, True)]  # predicted 1: wrong
    f = first_error_f1(sols, "x", 0.5)
    assert (f["erroneous_acc"], f["correct_acc"], f["f1"]) == (0.5, 0.5, 0.5)
    f = first_error_f1(sols, "x", 0.35)  # [1, 2->2? no: .3 < .35 -> 2], none, none
    assert (f["erroneous_acc"], f["correct_acc"]) == (0.5, 1.0)
    assert f["f1"] == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert best_threshold(sols, "x") == pytest.approx(0.35)  # midpoint of .3 and .4
    # steps before the first error are positive: 4 + 4 + 3 + 3 ... hand count of pairs
    assert step_auc(sols, "x") == pytest.approx(_auc_by_hand(sols))


def _auc_by_hand(sols):
    pos, neg = [], []
    for s in sols:
        bad = len(s.steps) if s.first_error is None else s.first_error
        for i, v in enumerate(s.scores["x"]):
            (pos if i < bad else neg).append(v)
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def test_rerank_rules_hand_computed():
    sols = [sol(0, [0.2], 1, False, "5"), sol(0, [0.3], 1, False, "5"),
            sol(0, [0.9], None, True, "7"), sol(0, [0.1], 1, False, "6")]
    assert rerank(sols, 4, "oracle") == 1.0
    assert rerank(sols, 4, "vote") == 0.0  # "5" twice
    assert rerank(sols, 4, "score", "x") == 1.0
    assert rerank(sols, 4, "weighted_vote", "x") == 1.0  # 0.9 > 0.2 + 0.3
    assert rerank(sols, 2, "score", "x") == 0.5  # groups {5, 5} and {7, 6}
    assert rerank(sols, 1, "oracle") == 0.25


# -- a PRM that reads the policy's own text -------------------------------------------------
def test_policy_format_reads_the_policys_own_tokens():
    """--format policy: the PRM's ids for a path are the policy's ids for its prompt and
    solution as the engine writes them (the step delimiter is the tag), so the policy's
    weights meet the text they were trained on."""
    from search.engines.hf import HFEngine
    from training.prm_train import policy_format

    engine = HFEngine.load("tiny-arith")
    fmt = policy_format(engine)
    assert (fmt.step_tag, fmt.question_template, fmt.good, fmt.bad) == ("\n\n", "{prompt}\n",
                                                                          "+", "-")
    p = arith.generate(1, seed=90_002, difficulty=3)[0]
    steps = tuple(s + "\n\n" for s in p.metadata["solution"].split("\n\n"))
    path = LabelledPath(p.id, p.prompt, str(p.answer), steps, (1.0,) * len(steps), True)
    ids, ends, _, _ = encode(engine.tokenizer, fmt, path)
    whole = engine.tokenizer(engine.prompt.text(p, engine.tokenizer) + "".join(steps))
    assert ids == whole["input_ids"]
    newline = engine.tokenizer("\n", add_special_tokens=False)["input_ids"]
    assert [ids[e] for e in ends] == newline * len(steps)  # read on each step's delimiter


def test_a_declared_format_loads_with_its_checkpoint(tmp_path):
    """A checkpoint carries its format (rewards.prm.declare_format) and HFPRM.load reads it
    with no argument: scores are the plain forward's in that format; a malformed
    declaration is a clear error."""
    from rewards.prm import PRMFormat, declare_format, declared_format

    fmt = PRMFormat("math_shepherd", step_tag="\n\n", good="+", bad="-",
                    question_template="{prompt}\n")
    model, tok = build("tiny-arith", fmt=fmt)
    model.eval().save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert declared_format(tmp_path) is None
    declare_format(tmp_path, fmt)
    assert declared_format(tmp_path) == fmt
    prm = HFPRM.load(str(tmp_path))
    assert prm.fmt == fmt
    p = arith.generate(1, seed=90_003, difficulty=2)[0]
    steps = tuple(s + "\n\n" for s in p.metadata["solution"].split("\n\n"))
    assert scored_by(prm, p, steps) == pytest.approx(
        plain_forward_scores(model, tok, fmt, p, steps), abs=1e-4)
    (tmp_path / "prm_format.json").write_text('{"family": "math_shepherd", "tag": 1}')
    with pytest.raises(ValueError, match="not a PRM format"):
        declared_format(tmp_path)


# -- the shipped checkpoint ------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny-arith-prm", "tiny-code-prm"])
def test_shipped_prm_is_found_by_name_before_anything_loads(name):
    from search.api import check_scorer
    from search.models import folder_of

    folder = folder_of(name)  # the core's registry: what rewards.prm reads
    assert folder is not None and (folder / "model.safetensors").is_file()
    meta = json.loads((folder / "prm.json").read_text())
    # its training problems are disjoint from the demo's (2024, 6173) and the fit's (99)
    seeds = {meta["training_problems"]["generator_seed"], meta["validation_problems"]["generator_seed"]}
    assert not seeds & {2024, 6173, 99, 12345, 777}
    assert meta["command"].startswith("python -m training.prm_train")
    assert meta["policy"] == name.removesuffix("-prm")
    assert check_scorer(f"prm:{name}") == f"prm:{name}"
    policy = name.removesuffix("-prm")  # embedded, kept in a folder, but no PRM
    with pytest.raises(FileNotFoundError, match=f"{policy!r} is no PRM"):
        HFPRM.load(policy)


@pytest.mark.parametrize("name", ["tiny-arith-prm", "tiny-code-prm"])
def test_shipped_prm_loads_by_name_and_scores_as_a_plain_forward(name):
    """`scorer="prm:<name>"` loads the shipped checkpoint as any hub PRM; its step scores on
    a held-out gold solution (a program: its lines) are the plain full-prefix forward's,
    read at each step's tag."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from problems import codegen
    from rewards.prm import declared_format
    from search.scoring import load
    from training.reasoners import prm_folder

    prm = load(f"prm:{name}")
    assert isinstance(prm, HFPRM) and prm.name == f"prm:{name}"
    folder = prm_folder(name)  # found here by training's own table
    assert folder is not None
    fmt = declared_format(folder) or MATH_SHEPHERD
    assert prm.fmt == fmt
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    if name == "tiny-arith-prm":
        p = arith.generate(1, seed=90_001, difficulty=5)[0]
        steps = [s + "\n\n" for s in p.metadata["solution"].split("\n\n")]
    else:
        p = codegen.generate(1, seed=90_001, difficulty=3)[0]
        steps = p.metadata["solution"][len(p.prompt):].splitlines(keepends=True)
    got = scored_by(prm, p, steps)
    want = plain_forward_scores(model, tok, fmt, p, steps)
    assert got == pytest.approx(want, abs=1e-4)


def test_policy_surprise_is_the_engines_own_token_logprobs():
    """reports.studies.prm_bounds' no-training bound: a step's score is the policy's lowest token
    log-probability on the path so far. Reference: the model log-probabilities the engine
    recorded while sampling the path through its KV tree (Step.logprobs)."""
    from reports.studies.prm_bounds import surprise_scores
    from search.engines.hf import HFEngine

    engine = HFEngine.load("tiny-arith")
    leaves = Labeller(engine, LabelConfig(paths=2, temperature=1.0), seed=3).sample(
        arith.generate(2, seed=90_004, difficulty=3))
    paths = []
    want: dict[str, list[float]] = {"every token": [], "digits": []}
    for leaf in leaves:
        steps = [n.step for n in leaf.path()[1:] if n.step is not None]
        paths.append(LabelledPath(leaf.problem.id, leaf.problem.prompt, str(leaf.problem.answer),
                                  tuple(st.text for st in steps), (1.0,) * len(steps),
                                  False))
        seen: list[tuple[bool, float]] = []  # (is a digit, log-probability) of each token so far
        for st in steps:
            pieces = engine.tokenizer.convert_ids_to_tokens(list(st.token_ids))
            seen += [(piece.strip().isdigit(), lp) for piece, lp in zip(pieces, st.logprobs)]
            want["every token"].append(min([0.0] + [lp for _, lp in seen]))
            want["digits"].append(min([0.0] + [lp for digit, lp in seen if digit]))
    got = surprise_scores(HFEngine.load("tiny-arith"), paths)  # forced, not sampled
    assert set(got) == set(want)
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-3)
    # a min over a subset of the tokens: never below the min over all of them
    assert all(d >= e for d, e in zip(got["digits"], got["every token"]))
    assert min(want["digits"]) < 0


def test_prm_eval_samples_programs_line_by_line():
    """reports.studies.prm_eval on tiny-code: a program's steps are its lines (as prm_train labels
    them), and each finished one carries its first error (training.evaluate.first_error)."""
    from problems import codegen
    from reports.studies.prm_eval import collect
    from search.engines.hf import HFEngine

    engine = HFEngine.load("tiny-code")
    sols = collect(engine, {}, codegen.generate(2, seed=90_006, difficulty=2), samples=3, seed=0)
    assert len(sols) == 6
    for s in sols:
        assert all(step.count("\n") <= 1 and (step.endswith("\n") or step is s.steps[-1])
                   for step in s.steps)
        if s.finished:
            assert s.first_error is None or 0 <= s.first_error < len(s.steps)
    assert any(len(s.steps) >= 2 for s in sols)
    assert any(s.finished and s.first_error is not None for s in sols) or all(
        s.correct for s in sols)
