"""The field's PRM formats, one row each, read as the model card's own usage code reads them.

A row says which model class holds the PRM (`head`, loaded by rewards.prm_load), how a
question and its steps become token ids, and which position's output is each step's reward
(`Encoded.at`). The hub's PRMs score a whole path in one forward, so a row encodes the path
whole, as its card does: a step's tokens can depend on its neighbours (sentencepiece spaces,
chat templates), and only a whole-path encoding is the card's.

| name          | card / code it follows                               | reward at                       |
| math-shepherd | peiyi9979/math-shepherd-mistral-7b-prm, README usage  | each "ки" tag token: P(+)/(P(+)+P(-)) |
| qwen-prm      | Qwen/Qwen2.5-Math-PRM-7B (-72B), README usage         | each "<extra_0>": softmax(head)[1] |
| rlhflow       | RLHFlow/Llama3.1-8B-PRM-Deepseek-Data, README usage;  | the token before each assistant "+": |
|               | search-and-learn sal/models/reward_models.py RLHFFlow | P(+)/(P(+)+P(-))                |
| trl           | trl/trainer/prm_trainer.py PRMTrainer.tokenize_row    | each step's last token (separator): softmax(logits)[1] |
| value-head    | SkyworkAI/skywork-o1-prm-inference model_utils        | each step token "\\n": sigmoid(v_head) |
|               | (io_utils.prepare_input, prm_model.PRM_MODEL)          |                                 |

The project's own PRMs declare their reading in prm_format.json (rewards.prm.PRMFormat) and
are read by rewards.prm.HFPRM; `FORMAT_NAMES` lists every name `format=` takes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


class PRMFormatError(ValueError):
    """A PRM that cannot be read as its format says: refused before any search runs."""


@dataclass(frozen=True)
class Encoded:
    """A path as a PRM reads it: its token ids and, per step, the position whose output is
    that step's reward."""

    ids: list[int]
    at: list[int]


# heads: which model class holds the PRM and what its output at a position is
LM_PAIR = "causal-lm"                # logits of two label tokens: P(good) / (P(good) + P(bad))
QWEN_HEAD = "qwen2-process-reward"   # Qwen2ForProcessRewardModel's two-way head: softmax[1]
TOKEN_CLASSES = "token-classification"  # AutoModelForTokenClassification, 2 labels: softmax[1]
VALUE = "value-head"                 # a causal LM plus v_head.summary (hidden -> 1): sigmoid


@dataclass(frozen=True)
class HubFormat:
    """One row of the table: `encode(tokenizer, question, steps)` and, for a causal-LM head,
    `pair(tokenizer)`, the (good, bad) label token ids whose logits make the reward."""

    name: str
    head: str
    cite: str
    encode: Callable[[Any, str, Sequence[str]], Encoded]
    pair: Callable[[Any], tuple[int, int]] | None = None
    path_agg: str = "min"


def _ids(out: Any) -> list[int]:
    """Token ids from a tokenizer call or apply_chat_template (a list or a BatchEncoding)."""
    if hasattr(out, "keys"):
        out = out["input_ids"]
    return [int(i) for i in out]


def _where(ids: Sequence[int], token: int, steps: Sequence[str], what: str) -> list[int]:
    """The positions of `token` in ids: one per step, else the path cannot be read."""
    at = [i for i, t in enumerate(ids) if t == token]
    if len(at) != len(steps):
        raise PRMFormatError(f"{what} occurs {len(at)} times in the encoded path of "
                             f"{len(steps)} steps (the question or a step holds it, or the "
                             "tokenizer merges it with its neighbours): the path cannot be read")
    return at


def _clean(steps: Sequence[str]) -> list[str]:
    """A step's text without the whitespace around it (the engine's step delimiter): the
    cards' examples give steps bare."""
    return [s.strip() for s in steps]


# -- Math-Shepherd ---------------------------------------------------------------------------
# card: input = f"{question} {output}", output = steps joined by " ки\n" and ending " ки";
# tokenizer.encode(input) (with BOS); candidate_tokens = tokenizer.encode("+ -")[1:];
# step_tag_id = tokenizer.encode("ки")[-1]; reward = softmax(logits[:, :, candidates])[..., 0]
# at every position whose input id is the tag (the logits AT the tag, not one token later)
SHEPHERD_TAG = "ки"


def shepherd_encode(tok: Any, question: str, steps: Sequence[str]) -> Encoded:
    steps = _clean(steps)
    text = f"{question} " + "".join(f"{s} {SHEPHERD_TAG}\n" for s in steps)[:-1]
    ids = _ids(tok.encode(text))
    tag = _ids(tok.encode(SHEPHERD_TAG))[-1]
    return Encoded(ids, _where(ids, tag, steps, f"the step tag {SHEPHERD_TAG!r}"))


def shepherd_pair(tok: Any) -> tuple[int, int]:
    return _labels(tok, _ids(tok.encode("+ -"))[1:], "Math-Shepherd reads "
                   "tokenizer.encode('+ -')[1:] (after BOS)")


def _labels(tok: Any, pair: list[int], how: str) -> tuple[int, int]:
    """The (good, bad) label ids a card's code picks, refused unless they are "+" and "-"
    (a tokenizer unlike the card's makes the same code pick other tokens)."""
    spelled = [str(tok.decode([i])).strip() for i in pair]
    if spelled != ["+", "-"]:
        raise PRMFormatError(f"{how} as its ('+', '-') label tokens; on this tokenizer that "
                             f"gives {pair} = {spelled}")
    return pair[0], pair[1]


# -- Qwen2.5-Math-PRM -----------------------------------------------------------------------
# card: messages = [system, user: query, assistant: "<extra_0>".join(steps) + "<extra_0>"],
# apply_chat_template(tokenize=False, add_generation_prompt=False), tokenizer.encode(that);
# step_sep_id = tokenizer.encode("<extra_0>")[0]; reward = softmax(logits)[:, 1] at each sep
QWEN_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
QWEN_SEP = "<extra_0>"


def qwen_encode(tok: Any, question: str, steps: Sequence[str]) -> Encoded:
    steps = _clean(steps)
    messages = [{"role": "system", "content": QWEN_SYSTEM},
                {"role": "user", "content": question},
                {"role": "assistant", "content": QWEN_SEP.join(steps) + QWEN_SEP}]
    text = _chat(tok, messages, tokenize=False, add_generation_prompt=False)
    ids = _ids(tok.encode(text))
    sep = _ids(tok.encode(QWEN_SEP))
    if len(sep) != 1:
        raise PRMFormatError(f"Qwen2.5-Math-PRM reads tokenizer.encode({QWEN_SEP!r})[0]; this "
                             f"tokenizer gives {sep}: {QWEN_SEP} is not one special token here")
    return Encoded(ids, _where(ids, sep[0], steps, f"the separator {QWEN_SEP!r}"))


def _chat(tok: Any, messages: list[dict[str, str]], **kwargs: Any) -> Any:
    if not getattr(tok, "chat_template", None):
        raise PRMFormatError("this format reads a chat, but the tokenizer has no chat template")
    return tok.apply_chat_template(messages, **kwargs)


# -- RLHFlow --------------------------------------------------------------------------------
# card: conversation = for each step k: user turn (question + " " + step 0, then step k),
# assistant turn "+"; input_ids = apply_chat_template(conversation); the last step's reward is
# softmax(logits[:, -3, [encode("+")[-1], encode("-")[-1]]])[:, 0], the position predicting
# the assistant's "+" (Llama 3.1: "+", "<|eot_id|>" follow it). search-and-learn's batched
# RLHFFlow reads every step at once in the full conversation, at the token before each
# assistant turn's "+"; a causal model makes the two readings the same.
RLHFLOW_GOOD, RLHFLOW_BAD = "+", "-"


def rlhflow_conversation(question: str, steps: Sequence[str]) -> list[dict[str, str]]:
    conv = []
    for k, step in enumerate(steps):
        conv.append({"role": "user", "content": f"{question} {step}" if k == 0 else step})
        conv.append({"role": "assistant", "content": RLHFLOW_GOOD})
    return conv


def rlhflow_encode(tok: Any, question: str, steps: Sequence[str]) -> Encoded:
    steps = _clean(steps)
    conv = rlhflow_conversation(question, steps)
    ids = _ids(_chat(tok, conv, tokenize=True))
    good = rlhflow_pair(tok)[0]
    at = []
    for k in range(len(steps)):  # the chat up to step k's user turn, the assistant's header
        head = _ids(_chat(tok, conv[:2 * k + 1], tokenize=True, add_generation_prompt=True))
        if ids[:len(head)] != head or len(ids) <= len(head) or ids[len(head)] != good:
            raise PRMFormatError(f"step {k}: the chat template does not render the assistant's "
                                 f"{RLHFLOW_GOOD!r} right after its header (the conversation "
                                 "tokenised whole and up to that turn disagree)")
        at.append(len(head) - 1)
    return Encoded(ids, at)


def rlhflow_pair(tok: Any) -> tuple[int, int]:
    return _labels(tok, [_ids(tok.encode(RLHFLOW_GOOD))[-1], _ids(tok.encode(RLHFLOW_BAD))[-1]],
                   "RLHFlow reads tokenizer.encode('+')[-1], tokenizer.encode('-')[-1]")


# -- TRL PRMTrainer -------------------------------------------------------------------------
# PRMTrainer.tokenize_row: prompt = tokenizer(prompt, add_special_tokens=False), BOS first
# when the tokenizer has one; each completion = tokenizer(step, add_special_tokens=False) +
# tokenizer.encode(step_separator, add_special_tokens=False); a step's label sits on its
# last token (the separator's last). PRMConfig.step_separator defaults to "\n"; labels are
# int(bool): 1 = a correct step, so the reward is softmax(logits)[1] there.
TRL_SEPARATOR = "\n"


def trl_encode(tok: Any, question: str, steps: Sequence[str]) -> Encoded:
    ids = _ids(tok(question, add_special_tokens=False))
    if tok.bos_token_id is not None:
        ids = [int(tok.bos_token_id)] + ids
    sep = _ids(tok.encode(TRL_SEPARATOR, add_special_tokens=False))
    at = []
    for step in _clean(steps):
        ids += _ids(tok(step, add_special_tokens=False)) + sep
        at.append(len(ids) - 1)
    return Encoded(ids, at)


# -- value head (Skywork-o1-Open-PRM) -------------------------------------------------------
# io_utils.prepare_input: prompt = tokenizer.encode(bos_token + problem + "\n"); the response
# split on the step token "\n", each piece tokenizer.encode(piece) (nothing for an empty one)
# followed by the step token's id (tokenizer.encode("\n")[-1]), its reward flag on that last
# id; PRM_MODEL: value = v_head(hidden_states[-1]).squeeze(-1), sigmoid with return_probs.
# A step holding "\n" is several of the card's steps; its reward is its last piece's.
VALUE_STEP_TOKEN = "\n"


def value_encode(tok: Any, question: str, steps: Sequence[str]) -> Encoded:
    if tok.bos_token is None:
        raise PRMFormatError("Skywork's value-head PRMs read tokenizer.bos_token + question; "
                             "this tokenizer has no bos_token")
    ids = _ids(tok.encode(tok.bos_token + question + VALUE_STEP_TOKEN))
    step_id = _ids(tok.encode(VALUE_STEP_TOKEN))[-1]
    at = []
    for step in _clean(steps):
        for piece in step.split(VALUE_STEP_TOKEN):
            ids += (_ids(tok.encode(piece)) if piece else []) + [step_id]
        at.append(len(ids) - 1)
    return Encoded(ids, at)


HUB_FORMATS: dict[str, HubFormat] = {f.name: f for f in (
    HubFormat("math-shepherd", LM_PAIR,
              "https://huggingface.co/peiyi9979/math-shepherd-mistral-7b-prm (README usage)",
              shepherd_encode, shepherd_pair),
    HubFormat("qwen-prm", QWEN_HEAD,
              "https://huggingface.co/Qwen/Qwen2.5-Math-PRM-7B (README usage, "
              "modeling_qwen2_rm.py)", qwen_encode),
    # search-and-learn aggregates RLHFlow's step scores by the last one (agg_strategy "last")
    HubFormat("rlhflow", LM_PAIR,
              "https://huggingface.co/RLHFlow/Llama3.1-8B-PRM-Deepseek-Data (README usage); "
              "huggingface/search-and-learn sal/models/reward_models.py RLHFFlow",
              rlhflow_encode, rlhflow_pair, path_agg="last"),
    HubFormat("trl", TOKEN_CLASSES,
              "huggingface/trl trl/trainer/prm_trainer.py (PRMTrainer.tokenize_row)",
              trl_encode),
    HubFormat("value-head", VALUE,
              "SkyworkAI/skywork-o1-prm-inference model_utils/io_utils.py, prm_model.py",
              value_encode),
)}

DECLARED = "declared"  # the project's own: the folder's prm_format.json (rewards.prm.PRMFormat)
FORMAT_NAMES = (*HUB_FORMATS, DECLARED)

# hub ids whose format the table knows (the card names it); any other PRM says its format
KNOWN_IDS = {
    "peiyi9979/math-shepherd-mistral-7b-prm": "math-shepherd",
    "Qwen/Qwen2.5-Math-PRM-7B": "qwen-prm",
    "Qwen/Qwen2.5-Math-PRM-72B": "qwen-prm",
    "RLHFlow/Llama3.1-8B-PRM-Deepseek-Data": "rlhflow",
    "RLHFlow/Llama3.1-8B-PRM-Mistral-Data": "rlhflow",
    "Skywork/Skywork-o1-Open-PRM-Qwen-2.5-1.5B": "value-head",
    "Skywork/Skywork-o1-Open-PRM-Qwen-2.5-7B": "value-head",
}


def hub_format(name: str) -> HubFormat:
    """The row called `name`; PRMFormatError naming the rows for any other name."""
    if name not in HUB_FORMATS:
        import difflib

        close = difflib.get_close_matches(name, FORMAT_NAMES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise PRMFormatError(f"unknown PRM format {name!r}{hint}; formats: "
                             f"{', '.join(FORMAT_NAMES)}")
    return HUB_FORMATS[name]


def check_format(name: str) -> None:
    """Raise PRMFormatError for a `format=` value that names no row (loads nothing)."""
    if name != DECLARED:
        hub_format(name)
