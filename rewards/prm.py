"""Process reward models from transformers: loading by name (load_prm), and the project's own
PRMs scored step by step with a KV cache per tree (HFPRM).

Which reading a PRM gets (rewards.prm_load.choose_format): a hub family's, read as its model
card reads it (rewards.prm_formats: math-shepherd, qwen-prm, rlhflow, trl, value-head; scored
by rewards.prm_hub.HubPRM), or the project's own, declared by the checkpoint in
prm_format.json (a PRMFormat: its step tag, question template, good/bad tokens), as
training.prm_train's PRMs do. Each loads by its format's class, its head checked
(rewards.prm_load): a mismatch is an error, never a fallback.

The project's own formats (PRMFormat families):
  math_shepherd  a causal LM reads "question step1<tag>step2<tag>..."; a step's reward is
                 P("+") / (P("+") + P("-")) after the last token of its text + tag, as
                 training.prm_train trains it (the hub's Math-Shepherd reads AT its "ки"
                 tag: that is rewards.prm_formats' math-shepherd, not this family).
  qwen_prm       a chat-formatted solution with "<extra_0>" after every step, a two-way
                 token classifier's softmax[1] after it; steps tokenised one by one.
HFPRM: each node adds its own step's tokens (step text + tag), so scoring a child after its
parent runs only the child's tokens through the PRM. Steps are tokenised one by one (not the
joined text), which can differ from whole-text tokenisation at step boundaries.
Memory: after each call the PRM keeps only the paths it just scored (what a search expands
next) of the calling search's trees; anything else is recomputed on demand and charged.
Concurrent searches (search.solve_many) share the PRM: their scoring forwards are batched
like the generator's (search.runtime.sched), each score what it is alone.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from rewards.prm_formats import PRMFormatError
from search.runtime import packed
from search.runtime.kvstore import DEFAULT_CAP
from search.runtime.kvtree import KVTree
from search.runtime.lean import lean_forward
from search.runtime.passes import Job
from search.runtime.sched import Scheduler
from search.runtime.transfer import device_or_default
from search.session import Bindable
from search.types import Node, Problem


@dataclass(frozen=True)
class PRMFormat:
    """How a PRM family reads a solution.

    good/bad: for LM-type PRMs, the tokens whose probabilities at the tag give the reward;
    None for reward-head PRMs (softmax of the head's output, last label = good).
    path_agg: how a solution's score is formed from its step rewards. Both families: the
    minimum (Math-Shepherd ranks solutions by their lowest step score; the Qwen2.5-Math-PRM
    report reads the same minimum in its Best-of-N analysis): a solution is as sound as
    its weakest step.
    """

    family: str
    step_tag: str
    good: str | None = None
    bad: str | None = None
    chat: bool = False
    system: str | None = None
    question_template: str = "{prompt} "
    path_agg: str = "min"


MATH_SHEPHERD = PRMFormat("math_shepherd", step_tag=" ки\n", good="+", bad="-")
QWEN_PRM = PRMFormat("qwen_prm", step_tag="<extra_0>", chat=True,
                     system="Please reason step by step, and put your final answer within "
                            "\\boxed{}.")
FORMATS = {f.family: f for f in (MATH_SHEPHERD, QWEN_PRM)}


FORMAT_FILE = "prm_format.json"  # a checkpoint's own reading (declared_format)


def declared_format(folder: str | Path) -> PRMFormat | None:
    """The format a checkpoint folder declares in FORMAT_FILE, None where it declares none
    (a hub id, or a folder without the file)."""
    path = Path(folder) / FORMAT_FILE
    if not path.is_file():
        return None
    fields = json.loads(path.read_text())
    try:
        return PRMFormat(**fields)
    except TypeError as err:
        raise PRMFormatError(f"{path}: not a PRM format ({err})") from None


def declare_format(folder: str | Path, fmt: PRMFormat) -> None:
    """Write `fmt` as the format of the checkpoint in `folder` (declared_format reads it)."""
    (Path(folder) / FORMAT_FILE).write_text(json.dumps(asdict(fmt), indent=1) + "\n")


def detect_format(model: Any) -> PRMFormat:
    """qwen_prm for reward-head models, math_shepherd for causal LMs."""
    archs = " ".join(getattr(model.config, "architectures", None) or [type(model).__name__])
    return QWEN_PRM if ("RewardModel" in archs or "TokenClassification" in archs) else MATH_SHEPHERD


def prompt_ids(tokenizer: Any, fmt: PRMFormat, prompt: str) -> list[int]:
    """The question's token ids as a PRM of this format reads them."""
    if fmt.chat:
        msgs = ([{"role": "system", "content": fmt.system}] if fmt.system else [])
        msgs.append({"role": "user", "content": prompt})
        out = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
    else:
        ids = tokenizer(fmt.question_template.format(prompt=prompt))["input_ids"]
    return [int(i) for i in ids]


def step_ids(tokenizer: Any, fmt: PRMFormat, text: str) -> list[int]:
    """One step's token ids: its text, stripped, and the step tag; the PRM's output after
    the last of them is the step's reward."""
    return [int(i) for i in tokenizer(text.strip() + fmt.step_tag,
                                      add_special_tokens=False)["input_ids"]]


def label_ids(tokenizer: Any, fmt: PRMFormat) -> tuple[int, int] | None:
    """(good, bad) token ids of an LM-type PRM, None for reward-head ones."""
    if fmt.good is None:
        return None
    return (_single_token(tokenizer, fmt.good), _single_token(tokenizer, str(fmt.bad)))


def _single_token(tokenizer: Any, text: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise PRMFormatError(f"PRM label {text!r} is not a single token for this tokenizer: "
                             f"{ids}")
    return int(ids[0])


class HFPRM(Bindable):
    """A transformers PRM behind the Scorer protocol (one value per node's latest step)."""

    name = "prm"

    def __init__(self, model: Any, tokenizer: Any, fmt: PRMFormat | str | None = None, *,
                 device: str | torch.device | None = None, fast: bool = True,
                 scheduler: Scheduler | None = None, kv_cache: int = DEFAULT_CAP) -> None:
        """kv_cache: bytes of node KV kept for reuse (search.runtime.kvstore.NodeStore: least
        recently used out first; what is dropped is recomputed, uncharged, when read again)."""
        if not isinstance(kv_cache, int) or kv_cache < 0:
            raise ValueError(f"kv_cache must be an int >= 0 (bytes), got {kv_cache!r}")
        self.device = device_or_default(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.fmt = (FORMATS[fmt] if isinstance(fmt, str) else fmt) or detect_format(model)
        self.path_agg = self.fmt.path_agg
        self.kv = KVTree(self.model, self.device, own_tokens=self._own, as_scorer=True,
                         cap=kv_cache)
        # its scoring calls: its own scheduler, or a policy engine's to share its lanes
        self.scheduler = self.kv.scheduler = scheduler or Scheduler()
        # fast: run the model as the generator engine does (search.engines.hf): packed
        # linears on CPU (a second copy of the linear weights) and, for Llama-family causal
        # LMs (Math-Shepherd's Mistral), the lean forward, through which concurrent
        # searches' scoring forwards share one batched forward (search.runtime.sched)
        if fast:
            if self.device.type == "cpu":
                packed.pack_linears(self.model)
            self.kv.forward = lean_forward(self.model) or self.model
            self.kv.attend_in_place()  # as the engine's: paths read where they live
        self._ids: weakref.WeakKeyDictionary[Node, tuple[int, ...]] = weakref.WeakKeyDictionary()
        self._pair = label_ids(tokenizer, self.fmt)

    @classmethod
    def load(cls, name_or_path: str, fmt: PRMFormat | str | None = None, **kwargs: Any) -> Any:
        """load_prm(name_or_path, format=fmt, **kwargs) (format= may come in kwargs, as a
        scorer spec's options do): an HFPRM for a format of the project's own, a
        rewards.prm_hub.HubPRM for a hub format."""
        return load_prm(name_or_path, format=kwargs.pop("format", fmt), **kwargs)

    def prompt_ids(self, problem: Problem) -> list[int]:
        return prompt_ids(self.tokenizer, self.fmt, problem.prompt)

    def _own(self, node: Node) -> tuple[int, ...]:
        """This PRM's tokens for a node: the formatted question, or step text + tag."""
        ids = self._ids.get(node)
        if ids is None:
            if node.step is None:
                ids = tuple(self.prompt_ids(node.problem))
            else:
                ids = tuple(step_ids(self.tokenizer, self.fmt, node.step.text))
            self._ids[node] = ids
        return ids

    def reward(self, out: torch.Tensor) -> float:
        """The reward from the PRM's output at a step's tag: LM logits [V] or head [labels]."""
        if self._pair is not None:
            return torch.softmax(out[list(self._pair)], -1)[0].item()
        return torch.softmax(out, -1)[-1].item()

    def score(self, problem: Problem, nodes: Sequence[Node]) -> list[float]:
        del problem  # each node's root carries it
        if any(node.step is None for node in nodes):
            raise ValueError("a PRM scores steps; the root has none")
        self.meter.charge_scorer(calls=len(nodes))
        # one job (search.runtime.sched): concurrent searches' PRM forwards are batched
        return self.scheduler.run(self._score(list(nodes)), cancel=self.session.cancel)

    def _score(self, nodes: list[Node]) -> Job[list[float]]:
        yield from self.kv.ensure_job(list({n.id: n for n in nodes}.values()), self.session)
        values = []
        for node in nodes:
            seg = self.kv.get(node)
            assert seg is not None and seg.logits is not None
            values.append(self.reward(seg.logits))
        return values


def check_embedded(name: str, format: object = None) -> None:  # noqa: A002
    """Refuse, loading nothing, an embedded model named as a PRM (no format given) whose
    folder declares no FORMAT_FILE: a model, not a PRM (prm:tiny-arith for tiny-arith-prm)."""
    from search.models import ModelNotFoundError, folder_of

    kept = folder_of(name)
    if kept is not None and format is None and declared_format(kept) is None:
        raise ModelNotFoundError(f"the embedded model {name!r} is no PRM: its "
                                 f"folder {kept} declares no {FORMAT_FILE}")


def load_prm(name_or_path: str, *, format: PRMFormat | str | None = None,  # noqa: A002
             trust_remote_code: bool = False, **kwargs: Any) -> Any:
    """Load a PRM by embedded name ("tiny-arith-prm": kept in a folder that declares its
    format, search.models.folder_of), local path or Hugging Face id, in `format`: a hub
    format's name (rewards.prm_formats), "declared" (the folder's prm_format.json), a
    PRMFormat (a reading of the project's own), or None (declared, else
    the hub id's, else the one format the checkpoint's class fits). trust_remote_code: let
    the checkpoint's own code run (Qwen2.5-Math-PRM's class is such code). kwargs: device
    (and fast, for HFPRM). A format the checkpoint does not fit raises
    rewards.prm_formats.PRMFormatError; a checkpoint that is not there, ModelNotFoundError.
    The PRM's `load_seconds` is the time this took."""
    import time

    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

    from rewards.prm_formats import DECLARED, PRMFormatError, hub_format
    from rewards.prm_hub import HubPRM
    from rewards.prm_load import choose_format, load_head, load_model
    from search.models import ModelNotFoundError, folder_of
    from search.scoring import prm_spec

    began = time.perf_counter()
    check_embedded(name_or_path, format)
    kept = folder_of(name_or_path)
    where = str(kept or name_or_path)
    own = format
    device = device_or_default(kwargs.get("device"))
    try:
        declared = declared_format(where) if Path(where).is_dir() else None
        if isinstance(own, PRMFormat):
            chosen, declared = DECLARED, own
        else:
            chosen = choose_format(name_or_path, where, own, declared is not None)
        tok = AutoTokenizer.from_pretrained(where, trust_remote_code=trust_remote_code)
        if chosen == DECLARED:
            assert declared is not None
            head = declared.good is None  # a reward head: a two-way token classifier
            auto = AutoModelForTokenClassification if head else AutoModelForCausalLM
            model = load_model(auto, where, f"declared {declared.family}", trust_remote_code,
                               device)
            prm: Any = HFPRM(model, tok, declared, **kwargs)
        else:
            fmt = hub_format(chosen)
            for own_only in ("fast", "kv_cache"):  # HFPRM's; a hub PRM runs plain forwards
                kwargs.pop(own_only, None)
            prm = HubPRM(load_head(where, fmt, trust_remote_code=trust_remote_code,
                                   device=device), tok, fmt, **kwargs)
    except PRMFormatError:
        raise
    except (OSError, ValueError) as err:
        raise ModelNotFoundError(f"could not load PRM {name_or_path!r}: {err}") from err
    prm.name = prm_spec(name_or_path, format=format if isinstance(format, str) else None,
                        trust_remote_code=trust_remote_code)
    prm.load_seconds = time.perf_counter() - began
    return prm
