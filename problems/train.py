"""Train an embedded reasoner from scratch on freshly generated problems, on a CPU.

    python -m problems.train tiny-arith [--minutes 45] [--seed 0] [--out problems/models/tiny-arith]

A transformers LlamaForCausalLM over a character tokenizer (search.testing.char_tokenizer)
learns `prompt + "\\n" + solution + <eos>` with the loss on the solution and <eos> only. The
run is a fixed number of optimizer steps (the config's `steps`), so the same seed and thread
count give the same weights; `--minutes` is only a safety cap (a run it cuts short says so in
training.json). Batch k is `problems.arith.generate(batch_size, seed=data_seed(seed, k),
difficulty=difficulties[k % len(difficulties)])`: every batch holds one difficulty (little
padding), and no evaluation seed (< 1,000,000) is ever trained on.

Saved in --out: config.json, generation_config.json, model.safetensors, the tokenizer files
and training.json (config, seed, threads, data description, loss curve, minutes).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from problems import arith
from search.testing import char_tokenizer

PROMPT_TEMPLATE = "{prompt}\n"  # the engine's plain-prompt template; the solution follows


@dataclass(frozen=True)
class Config:
    """Model shape, data mix and optimizer for one reasoner."""

    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 4
    intermediate: int = 384
    max_positions: int = 1536  # RoPE: costs no weights; covers difficulty 12 prompts+solutions
    difficulties: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
    batch_size: int = 16
    # (steps, peak lr) per phase; each phase starts a fresh AdamW with warmup, then decays
    # by cosine to lr * min_lr_ratio (a warm restart: phase 1 alone was too short to learn
    # to copy numbers out of the prompt, and the run went on from its saved weights)
    phases: tuple[tuple[int, float], ...] = ((1100, 3e-3), (1200, 2e-3))
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.98)
    grad_clip: float = 1.0
    prompt_template: str = PROMPT_TEMPLATE
    alphabet: str = field(default=arith.ALPHABET)


CONFIGS: dict[str, Config] = {
    "tiny-arith": Config(),
}


def data_seed(seed: int, batch: int) -> int:
    """Generator seed of training batch `batch`: >= 1,000,000, so disjoint from eval seeds."""
    return 1_000_000 * (seed + 1) + batch


def build(cfg: Config, seed: int) -> tuple[Any, Any]:
    """(model, tokenizer): a freshly initialised fp32 Llama over the config's characters."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tokenizer(cfg.alphabet)
    lcfg = LlamaConfig(vocab_size=len(tok), hidden_size=cfg.hidden,
                       intermediate_size=cfg.intermediate, num_hidden_layers=cfg.layers,
                       num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
                       max_position_embeddings=cfg.max_positions, bos_token_id=tok.bos_token_id,
                       eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                       tie_word_embeddings=True)
    torch.manual_seed(seed)
    return LlamaForCausalLM(lcfg), tok


def batch_tensors(cfg: Config, tok: Any, seed: int, k: int) -> tuple[torch.Tensor, ...]:
    """Batch k as (input_ids, attention_mask, labels), each [B, T], right-padded.

    labels are -100 on the prompt and the padding, so only solution + <eos> are learned.
    """
    difficulty = cfg.difficulties[k % len(cfg.difficulties)]
    probs = arith.generate(cfg.batch_size, seed=data_seed(seed, k), difficulty=difficulty)
    rows: list[tuple[list[int], int]] = []
    for p in probs:
        prompt = tok(cfg.prompt_template.format(prompt=p.prompt))["input_ids"]
        answer = tok(p.metadata["solution"])["input_ids"] + [tok.eos_token_id]
        rows.append((prompt + answer, len(prompt)))
    T = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), T), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    labels = torch.full((len(rows), T), -100, dtype=torch.long)
    for i, (row, n_prompt) in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
        labels[i, n_prompt:len(row)] = ids[i, n_prompt:len(row)]
    return ids, mask, labels


def phase_of(cfg: Config, step: int) -> tuple[int, int]:
    """(phase index, step within that phase) of a global step."""
    for i, (n, _) in enumerate(cfg.phases):
        if step < n:
            return i, step
        step -= n
    raise ValueError("step past the schedule")


def lr_at(cfg: Config, step: int) -> float:
    i, step = phase_of(cfg, step)
    n, lr = cfg.phases[i]
    if step < cfg.warmup:
        return lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, n - cfg.warmup)
    return lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def optimizer(cfg: Config, model: Any) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=cfg.phases[0][1], betas=cfg.betas)


def train(name: str, *, seed: int = 0, minutes: float = 45.0, out: Path | None = None,
          threads: int | None = None, steps: int | None = None, log_every: int = 50,
          save_every: int = 0, stop_after: int | None = None,
          resume_from: Path | None = None) -> Path:
    """Train `name` (a key of CONFIGS) and save it to `out`; returns the folder.

    stop_after: end after this many steps of the unchanged schedule; this reproduces a run
    that --minutes cut short (its training.json gives the step count).
    resume_from: a folder this function saved at the end of phase 1 (same seed and threads);
    training goes on from its weights with phase 2, as the uninterrupted run would.
    """
    cfg = CONFIGS[name]
    if steps is not None:  # trial runs: one short phase, recorded as such
        cfg = Config(**{**asdict(cfg), "phases": ((steps, cfg.phases[0][1]),)})
    total = sum(n for n, _ in cfg.phases)
    out = Path(out or Path(__file__).parent / "models" / name)
    if threads:
        torch.set_num_threads(threads)
    model, tok = build(cfg, seed)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{name}: {n_params / 1e6:.2f}M parameters, {total} steps, "
          f"{torch.get_num_threads()} threads", flush=True)
    first, resumed = 0, None
    if resume_from is not None:
        from safetensors.torch import load_file

        resumed = json.loads((Path(resume_from) / "training.json").read_text())
        if resumed["seed"] != seed or resumed["steps_done"] != cfg.phases[0][0]:
            raise ValueError(f"{resume_from} is not phase 1 of this run (seed {seed})")
        state = load_file(str(Path(resume_from) / "model.safetensors"))
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or set(missing) - {"lm_head.weight"}:  # tied lm_head is not stored
            raise ValueError(f"{resume_from}: weights do not fit this config")
        first = cfg.phases[0][0]
    opt = optimizer(cfg, model)
    model.train()
    start = time.monotonic()
    curve: list[dict[str, float]] = list(resumed["loss_curve"]) if resumed else []
    run_loss, run_n, done, tokens = 0.0, 0, first, 0
    for k in range(first, min(total, stop_after or total)):
        if k > 0 and phase_of(cfg, k)[1] == 0:
            opt = optimizer(cfg, model)  # a new phase starts from fresh moments
        if time.monotonic() - start > minutes * 60:
            print(f"time cap of {minutes} minutes reached at step {k}", flush=True)
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, k)
        ids, mask, labels = batch_tensors(cfg, tok, seed, k)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        done, tokens = k + 1, tokens + int(mask.sum())
        run_loss, run_n = run_loss + loss.item(), run_n + 1
        if done % log_every == 0 or done == total:
            elapsed = time.monotonic() - start
            curve.append({"step": done, "loss": round(run_loss / run_n, 4),
                          "minutes": round(elapsed / 60 + (resumed or {}).get("minutes", 0), 2)})
            print(f"step {done}/{total} loss {run_loss / run_n:.4f} lr {lr_at(cfg, k):.2e} "
                  f"{tokens / elapsed:.0f} tok/s {elapsed / 60:.1f} min", flush=True)
            run_loss, run_n = 0.0, 0
        if save_every and done % save_every == 0 and done < total:
            _save(model, tok, out / "checkpoints" / f"step-{done}", {"step": done})
    minutes_used = (time.monotonic() - start) / 60
    if resumed:  # the whole run's cost: phase 1's minutes and tokens count too
        minutes_used += resumed["minutes"]
        tokens += resumed["tokens_seen"]
    record = {
        "name": name, "seed": seed, "config": asdict(cfg), "parameters": n_params,
        "steps_done": done, "stopped_early": done < total, "minutes": round(minutes_used, 2),
        "minutes_cap": minutes, "resumed_after_step": first or None, "tokens_seen": tokens, "threads": torch.get_num_threads(),
        "reproduce": f"python -m problems.train {name} --seed {seed} --threads "
                     f"{torch.get_num_threads()}" + (f" --stop-after {done}" if done < total
                                                     else ""),
        "torch": torch.__version__, "python": platform.python_version(), "loss_curve": curve,
        "data": {
            "generator": "problems.arith.generate (seeded; problem i depends only on "
                         "(seed, difficulty, i))",
            "batch_k": "generate(batch_size, seed=1_000_000 * (seed + 1) + k, "
                       "difficulty=difficulties[k % len(difficulties)])",
            "sequence": "prompt_template.format(prompt=p.prompt) + p.metadata['solution'] "
                        "+ <eos>, character tokens, loss on solution + <eos> only",
            "held_out": "evaluation seeds are < 1,000,000 and never trained on",
        },
        "init": "torch.manual_seed(seed) before LlamaForCausalLM(config)",
    }
    _save(model, tok, out, record)
    print(f"saved {out} after {minutes_used:.1f} minutes", flush=True)
    return out


def _save(model: Any, tok: Any, out: Path, record: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.save_pretrained(out)  # config.json, generation_config.json, model.safetensors
    tok.save_pretrained(out)
    (out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    model.train()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m problems.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=sorted(CONFIGS))
    ap.add_argument("--minutes", type=float, default=45.0, help="wall-clock cap (default 45)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="default problems/models/<name>")
    ap.add_argument("--threads", type=int, default=2,
                    help="torch threads; exact reproduction needs the same count (default 2)")
    ap.add_argument("--steps", type=int, default=None, help="override the config's steps")
    ap.add_argument("--stop-after", type=int, default=None,
                    help="stop after N steps of the unchanged schedule (reproduces a capped run)")
    ap.add_argument("--save-every", type=int, default=0, help="also save checkpoints/step-N")
    ap.add_argument("--resume-from", type=Path, default=None,
                    help="go on from a folder saved at the end of phase 1")
    args = ap.parse_args(argv)
    train(args.name, seed=args.seed, minutes=args.minutes, out=args.out, threads=args.threads,
          steps=args.steps, save_every=args.save_every, stop_after=args.stop_after,
          resume_from=args.resume_from)


if __name__ == "__main__":
    main()
