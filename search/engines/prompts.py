"""How a Problem becomes a prompt. INSTRUCTIONS (the per-domain wording) is shared by every
engine, so a problem reads the same to a model whichever engine drives it; PromptFormat renders
prompts for the engines that hold no model here (search.engines.openai, search.engines.vllm):
a chat template when the tokenizer has one, else `template` over the plain text, as
search.engines.hf does. No torch import: a thin HTTP client stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from search.types import Problem

# a Problem whose metadata[PROMPT_FORM] is RAW is read as its prompt's text stands: no chat
# template, no instruction, no template around it (an OpenAI text completion on a chat model)
PROMPT_FORM, RAW = "prompt_form", "raw"

INSTRUCTIONS: Mapping[str, str] = {
    "math": ("{prompt}\n\nSolve the problem step by step. Put a blank line between steps. "
             "End with: The answer is <answer>."),
    "code": ("Complete the following Python function. Reply with the whole function in a "
             "```python code block.\n\n{prompt}"),
}


@dataclass(frozen=True)
class PromptFormat:
    """chat: use the tokenizer's chat template (None: when it has one).
    template: the plain-text prompt around the problem when there is no chat template.
    instructions: per-domain wrapping of the user text (default: the transformers engine's)."""

    chat: bool | None = None
    system_prompt: str | None = None
    template: str = "{prompt}\n"
    instructions: Mapping[str, str] | None = None

    def uses_chat(self, tokenizer: Any) -> bool:
        if self.chat is None:
            return bool(getattr(tokenizer, "chat_template", None))
        if self.chat and tokenizer is None:
            raise ValueError("chat=True needs a tokenizer with a chat template")
        return self.chat

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        """The chat turns of `problem` (its own messages, else instructions + prompt)."""
        if problem.messages:
            return [dict(m) for m in problem.messages]
        wording = INSTRUCTIONS if self.instructions is None else self.instructions
        out = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        user = wording.get(problem.domain, "{prompt}").format(prompt=problem.prompt)
        return out + [{"role": "user", "content": user}]

    def text(self, problem: Problem, tokenizer: Any = None) -> str:
        """The whole prompt as text (the chat template rendered, generation prompt added)."""
        if raw(problem):
            return problem.prompt
        if self.uses_chat(tokenizer):
            return str(tokenizer.apply_chat_template(self.messages(problem), tokenize=False,
                                                     add_generation_prompt=True))
        if problem.messages:
            raise ValueError("the problem is given as chat messages but there is no chat "
                             "template (give a tokenizer that has one, or a plain prompt)")
        return self.template.format(prompt=problem.prompt)

    def ids(self, problem: Problem, tokenizer: Any) -> list[int]:
        """The prompt's token ids, tokenised as the transformers engine does."""
        if raw(problem):
            ids = tokenizer(problem.prompt)["input_ids"]
        elif self.uses_chat(tokenizer):
            out = tokenizer.apply_chat_template(self.messages(problem), tokenize=True,
                                                add_generation_prompt=True)
            ids = out["input_ids"] if isinstance(out, Mapping) else out
        else:
            ids = tokenizer(self.text(problem, tokenizer))["input_ids"]
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("the prompt tokenised to nothing")
        return ids


def raw(problem: Problem) -> bool:
    """Whether the problem's prompt is read as its text stands (PROMPT_FORM)."""
    if problem.metadata.get(PROMPT_FORM) != RAW:
        return False
    if problem.messages:
        raise ValueError("a raw prompt is text: give a prompt, not chat messages")
    return True
