"""Every hub PRM format against its model card's own usage code, re-implemented here on the
same random checkpoint (tests/prm_checkpoints.py) and the same text: the project's step
rewards, scored as a search scores them (nodes of a tree, several paths in one padded
batch), equal the card's within 1e-5 in fp32, and the reward is read at the card's token.

The references below follow, line for line, the usage code of:
  math-shepherd  huggingface.co/peiyi9979/math-shepherd-mistral-7b-prm README
  qwen-prm       huggingface.co/Qwen/Qwen2.5-Math-PRM-7B README (make_step_rewards)
  rlhflow        huggingface.co/RLHFlow/Llama3.1-8B-PRM-Deepseek-Data README (the -3 position)
  trl            trl/trainer/prm_trainer.py PRMTrainer.tokenize_row (where labels sit)
  value-head     SkyworkAI/skywork-o1-prm-inference (prepare_input, PRM_MODEL, derive_step_rewards)
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from prm_checkpoints import BUILDERS

from rewards.prm_hub import HubPRM
from search import scoring
from search.types import Node, Problem, Step

QUESTION = "Janet has 3 apples and buys 4 more. How many apples does she have?"
STEPS = ["She starts with 3 apples.", "She buys 4 more, so 3 + 4 = 7.", "The answer is 7."]
OTHER = ["She starts with 3 apples.", "3 + 4 = 8.", "So she has 8 apples.", "The answer is 8."]
QWEN_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
TOL = 1e-5


def shepherd_card(folder: Path, question: str, steps: list[str]) -> list[float]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    candidate_tokens = tokenizer.encode("+ -")[1:]
    step_tag_id = tokenizer.encode("ки")[-1]
    output = " ки\n".join(steps) + " ки"
    input_id = torch.tensor([tokenizer.encode(f"{question} {output}")])
    with torch.no_grad():
        logits = model(input_id).logits[:, :, candidate_tokens]
        scores = logits.softmax(dim=-1)[:, :, 0]
        return scores[input_id == step_tag_id].tolist()


def qwen_card(folder: Path, question: str, steps: list[str]) -> list[float]:
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    messages = [{"role": "system", "content": QWEN_SYSTEM},
                {"role": "user", "content": question},
                {"role": "assistant", "content": "<extra_0>".join(steps) + "<extra_0>"}]
    conversation_str = tokenizer.apply_chat_template(messages, tokenize=False,
                                                     add_generation_prompt=False)
    input_ids = tokenizer.encode(conversation_str, return_tensors="pt")
    with torch.no_grad():
        outputs = model(input_ids=input_ids)
    step_sep_id = tokenizer.encode("<extra_0>")[0]
    token_masks = input_ids == step_sep_id
    probabilities = F.softmax(outputs[0], dim=-1) * token_masks.unsqueeze(-1)
    sample = probabilities[0]
    return sample[sample != 0].view(-1, 2)[:, 1].tolist()


def rlhflow_card(folder: Path, question: str, steps: list[str]) -> list[float]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    candidate_tokens = [tokenizer.encode("+")[-1], tokenizer.encode("-")[-1]]
    conversation, scores = [], []
    for k in range(len(steps)):
        text = question + " " + steps[0] if k == 0 else steps[k]
        conversation.append({"content": text, "role": "user"})
        conversation.append({"content": "+", "role": "assistant"})
        input_ids = tokenizer.apply_chat_template(conversation, return_tensors="pt")
        if hasattr(input_ids, "keys"):  # transformers 5 returns a BatchEncoding
            input_ids = input_ids["input_ids"]
        with torch.no_grad():
            logits = model(input_ids).logits[:, -3, candidate_tokens]
            scores.append(logits.softmax(dim=-1)[:, 0].item())
    return scores


def trl_card(folder: Path, question: str, steps: list[str]) -> list[float]:
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForTokenClassification.from_pretrained(folder).eval()
    prompt_ids = tokenizer(question, add_special_tokens=False)["input_ids"]
    completions_ids = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in steps]
    separator_ids = tokenizer.encode("\n", add_special_tokens=False)
    completions_ids = [c + separator_ids for c in completions_ids]
    labels = [[-100] * (len(c) - 1) + [1] for c in completions_ids]
    completion_ids, labels = list(chain(*completions_ids)), list(chain(*labels))
    if tokenizer.bos_token_id is not None:
        prompt_ids = [tokenizer.bos_token_id] + prompt_ids
    input_ids = prompt_ids + completion_ids
    labels = [-100] * len(prompt_ids) + labels
    with torch.no_grad():
        logits = model(torch.tensor([input_ids])).logits[0]
    return logits[torch.tensor(labels) != -100].softmax(-1)[:, 1].tolist()


def value_card(folder: Path, question: str, steps: list[str]) -> list[float]:
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    response = "\n".join(steps)
    prompt_ids = tokenizer.encode(tokenizer.bos_token + question + "\n")
    response_ids, reward_flags = [], [0] * len(prompt_ids)
    step_token_id = tokenizer.encode("\n")[-1]
    for step in response.split("\n"):
        step_ids = tokenizer.encode(step) if step != "" else []
        step_ids += [step_token_id]
        flag = [0] * len(step_ids)
        flag[-1] = 1
        response_ids.extend(step_ids)
        reward_flags.extend(flag)
    input_ids = torch.tensor([prompt_ids + response_ids])
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        weight, bias = f.get_tensor("v_head.summary.weight"), f.get_tensor("v_head.summary.bias")
    with torch.no_grad():
        hidden = model(input_ids=input_ids, output_hidden_states=True).hidden_states[-1]
        rewards = torch.sigmoid(F.linear(hidden, weight, bias).squeeze(-1))
    flags = torch.tensor([reward_flags])
    return [rewards[0][i].item() for i in torch.nonzero(flags[0] == 1).view(-1)]


CARDS = {"math-shepherd": shepherd_card, "qwen-prm": qwen_card, "rlhflow": rlhflow_card,
         "trl": trl_card, "value-head": value_card}
SPEC = {"math-shepherd": ",format=math-shepherd", "rlhflow": ",format=rlhflow",
        "qwen-prm": ",trust_remote_code=true", "trl": "", "value-head": ""}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("prms")
    return {name: build(root / name) for name, build in BUILDERS.items()}


def hub(spec: str) -> HubPRM:
    prm = scoring.load(spec)
    assert isinstance(prm, HubPRM)
    return prm


def path_nodes(problem: Problem, steps: list[str], suffix: str = "") -> list[Node]:
    """The path's step nodes, each step's text as an engine leaves it (`suffix`: its
    delimiter)."""
    node, out = Node(problem=problem), []
    for text in steps:
        node = Node(parent=node, step=Step(text + suffix, (0,), (0.0,), "stop"))
        out.append(node)
    return out


@pytest.mark.parametrize("name", list(BUILDERS))
def test_step_rewards_equal_the_model_card(folders, name):
    """Two paths sharing a first step, all their nodes scored in one call (one padded
    batch), the steps with the engine's "\\n\\n" delimiter on them: each node's reward is
    the card's reward for its step."""
    folder = folders[name]
    prm = hub(f"prm:{folder}{SPEC[name]}")
    assert prm.fmt.name == name and prm.name == f"prm:{folder}{SPEC[name]}"
    problem = Problem(prompt=QUESTION)
    a, b = path_nodes(problem, STEPS, "\n\n"), path_nodes(problem, OTHER, "\n\n")
    got = prm.score(problem, a + b)
    want = CARDS[name](folder, QUESTION, STEPS) + CARDS[name](folder, QUESTION, OTHER)
    assert len(want) == len(got) == 7
    assert max(abs(x - y) for x, y in zip(got, want)) <= TOL
    assert len({round(v, 6) for v in want}) > 1  # a reading that varies, not a constant


@pytest.mark.parametrize("name", list(BUILDERS))
def test_the_reward_is_read_at_the_cards_token(folders, name):
    """The positions read hold the token the card reads at: Math-Shepherd's "ки" tag (not
    the "\\n" after it, one token late), Qwen's <extra_0>, RLHFlow's token just before the
    assistant's "+", the step separator for TRL and Skywork."""
    prm = hub(f"prm:{folders[name]}{SPEC[name]}")
    tok = prm.tokenizer
    enc = prm.encode(QUESTION, STEPS)
    read = [enc.ids[i] for i in enc.at]
    if name == "math-shepherd":
        assert read == [tok.encode("ки")[-1]] * 3
        assert [enc.ids[i + 1] for i in enc.at[:-1]] == [tok.encode("\n")[-1]] * 2
        assert enc.at[-1] == len(enc.ids) - 1
    elif name == "qwen-prm":
        assert read == [tok.convert_tokens_to_ids("<extra_0>")] * 3
    elif name == "rlhflow":
        assert [enc.ids[i + 1] for i in enc.at] == [tok.encode("+")[-1]] * 3
        assert enc.at[-1] == len(enc.ids) - 3  # the card's -3: "+", <|eot_id|> follow
    else:
        assert read == [tok.encode("\n", add_special_tokens=False)[-1]] * 3


def test_the_one_token_late_reading_differs(folders):
    """Reading Math-Shepherd at the "\\n" after its tag (the old reading) gives other
    values than the card: the offset matters on this checkpoint."""
    prm = hub(f"prm:{folders['math-shepherd']},format=math-shepherd")
    enc = prm.encode(QUESTION, STEPS)
    assert prm.pair is not None
    with torch.no_grad():
        logits = prm.model(torch.tensor([enc.ids])).logits[0][:, list(prm.pair)]
    at_tag = logits[enc.at[:-1]].softmax(-1)[:, 0]
    late = logits[[i + 1 for i in enc.at[:-1]]].softmax(-1)[:, 0]
    assert (at_tag - late).abs().max() > 1e-3
    assert prm.step_rewards(QUESTION, STEPS)[:2] == pytest.approx(at_tag.tolist(), abs=TOL)


def test_a_multi_line_step_is_read_as_skywork_splits_it(folders):
    """Skywork splits a response on "\\n": a step holding one is two of the card's steps,
    and its reward is its last piece's."""
    folder = folders["value-head"]
    prm = hub(f"prm:{folder}")
    steps = ["She starts with 3 apples.", "3 + 4\n= 7.", "The answer is 7."]
    want = value_card(folder, QUESTION, steps)
    assert len(want) == 4
    got = prm.step_rewards(QUESTION, steps)
    assert max(abs(x - y) for x, y in zip(got, [want[0], want[2], want[3]])) <= TOL


def test_a_16_bit_checkpoint_bound_for_the_cpu_loads_as_fp32_where_it_fits(tmp_path,
                                                                             monkeypatch):
    """A hub PRM saved in bf16 (transformers loads a checkpoint in its own dtype) is made
    fp32 for the CPU where it fits, as the engine's weights are; where it would not fit, it
    stays as saved."""
    from transformers import AutoModelForCausalLM

    from rewards.prm import load_prm
    from search.runtime import dtypes

    folder = BUILDERS["math-shepherd"](tmp_path / "ms")
    saved: Any = AutoModelForCausalLM.from_pretrained(folder)
    saved.to(torch.bfloat16).save_pretrained(folder)
    prm = load_prm(str(folder), format="math-shepherd", device="cpu")
    assert {p.dtype for p in prm.model.parameters()} == {torch.float32}
    monkeypatch.setattr(dtypes, "fp32_fits", lambda m: False)
    kept = load_prm(str(folder), format="math-shepherd", device="cpu")
    assert {p.dtype for p in kept.model.parameters()} == {torch.bfloat16}
