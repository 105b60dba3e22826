"""A trained run as an lm-evaluation-harness model: its three requests over GPT-2 BPE, then the harness's tasks.

`RunLM` answers the harness's requests with plain strings and needs no lm-eval; `harness_lm` wraps it in
lm-eval's `LM` interface (imported only then), and `evaluate` runs tasks through `lm_eval.simple_evaluate`.

- loglikelihood(context, continuation): log P(continuation | context) summed over its tokens, and whether
  each continuation token is the argmax (greedy). As the harness's own models do, spaces that end the
  context move to the continuation and the continuation's tokens are those of encode(context +
  continuation) after encode(context)'s; unlike them, the model always reads EOT first, since every
  training document starts after one (an empty context is EOT alone, as in the harness). Greedy and
  generation choose among the tokenizer's ids (a model's vocabulary may be padded past them). Inputs longer
  than `max_len` are left-truncated; batches are right-padded, which a causal model never reads.
- loglikelihood_rolling(text): log P(text) over EOT + its tokens in non-overlapping windows of
  `max_len` (the harness's rolling windows with one token of context, the same as `lab eval ppl`).
- generate_until(context, {until, max_gen_toks}): greedy tokens after EOT + context until EOT, a stop
  string or max_gen_toks, the text cut before the first stop string; sampling is refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from falcon_lab.eval.perplexity import stream_nll

if TYPE_CHECKING:
    import tiktoken

RESULTS_FILE = "harness.json"
MAX_GEN_TOKS = 256


class RunLM:
    """A causal LM over token ids (`model(ids[B, T]) -> logits[B, T, V]`) and its tokenizer, answering the
    harness's three requests."""

    def __init__(self, model: nn.Module, enc: tiktoken.Encoding, max_len: int, batch_size: int = 8,
                 device: torch.device | str = "cpu") -> None:
        if max_len < 1 or batch_size < 1:
            raise ValueError(f"max_len and batch_size must be >= 1, got {max_len} and {batch_size}")
        self.model, self.enc, self.max_len, self.batch_size, self.device = model, enc, max_len, batch_size, device

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """(EOT + context tokens, continuation tokens) as the harness splits them."""
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        whole = self.enc.encode_ordinary(context + continuation)
        head = self.enc.encode_ordinary(context)
        target = whole[len(head):]
        if not target:
            raise ValueError(f"continuation {continuation!r} encodes to no tokens after context {context[-40:]!r}")
        if len(target) > self.max_len:
            raise ValueError(f"a continuation of {len(target)} tokens does not fit a context length of {self.max_len}")
        return [self.enc.eot_token, *head], target

    @torch.no_grad()
    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, bool]]:
        """(log-likelihood in nats, greedy) of each (context, continuation)."""
        pairs = [self.encode_pair(c, x) for c, x in requests]
        rows = [([*head, *target][:-1][-self.max_len:], target) for head, target in pairs]
        # Longest first, so a batch holds rows of similar length; answers go back in request order.
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))
        out: list[tuple[float, bool]] = [(0.0, False)] * len(rows)
        for lo in range(0, len(order), self.batch_size):
            block = order[lo:lo + self.batch_size]
            width = max(len(rows[i][0]) for i in block)
            ids = torch.tensor([rows[i][0] + [rows[i][0][-1]] * (width - len(rows[i][0])) for i in block])
            logp = F.log_softmax(self.model(ids.to(self.device)).double(), dim=-1).cpu()
            for b, i in enumerate(block):
                inputs, target = rows[i]
                at = logp[b, len(inputs) - len(target):len(inputs)]
                wanted = torch.tensor(target)
                score = float(at.gather(-1, wanted[:, None]).sum())
                out[i] = (score, bool((at[:, :self.enc.n_vocab].argmax(-1) == wanted).all()))
        return out

    def loglikelihood_rolling(self, texts: Sequence[str]) -> list[float]:
        """log P(text) in nats of each text, read after EOT in non-overlapping windows of max_len."""
        scores = []
        for text in texts:
            tokens = np.array([self.enc.eot_token, *self.enc.encode_ordinary(text)], dtype=np.int64)
            if len(tokens) < 2:
                scores.append(0.0)
                continue
            scores.append(-stream_nll(self.model, tokens, self.max_len, batch_size=self.batch_size,
                                      device=self.device).nll_sum)
        return scores

    @torch.no_grad()
    def generate_until(self, requests: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
        """Greedy continuation of each context, stopped by EOT, a string of `until` or `max_gen_toks`."""
        out = []
        for context, options in requests:
            options = dict(options or {})
            if options.get("do_sample") or float(options.get("temperature") or 0.0) > 0.0:
                raise ValueError(f"generate_until: sampling ({options}) is not offered; accepted: greedy "
                                 f"(do_sample false, temperature 0)")
            until = options.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            ids = [self.enc.eot_token, *self.enc.encode_ordinary(context)]
            made: list[int] = []
            text = ""
            for _ in range(int(options.get("max_gen_toks", MAX_GEN_TOKS))):
                window = torch.tensor([(ids + made)[-self.max_len:]], device=self.device)
                nxt = int(self.model(window)[0, -1, :self.enc.n_vocab].argmax())
                if nxt == self.enc.eot_token:
                    break
                made.append(nxt)
                text = self.enc.decode(made)
                if any(stop in text for stop in until):
                    break
            cuts = [text.index(stop) for stop in until if stop in text]
            out.append(text[:min(cuts)] if cuts else text)
        return out


def harness_lm(scorer: RunLM):
    """`scorer` as an instance of lm-eval's `LM` (lm-eval is imported here, and only here)."""
    from lm_eval.api.model import LM

    class FalconLabLM(LM):
        """A falcon-lab run in lm-evaluation-harness."""

        def __init__(self) -> None:
            super().__init__()
            self.scorer = scorer

        def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
            return self.scorer.loglikelihood([tuple(r.args) for r in requests])

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
            return self.scorer.loglikelihood_rolling([r.args[0] for r in requests])

        def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
            return self.scorer.generate_until([(r.args[0], r.args[1]) for r in requests])

    return FalconLabLM()


def offline() -> None:
    """Keep the harness's datasets and hub on local files: task data comes from the HF datasets cache (or a
    task's local files), never the network. Must run before `datasets` is imported; a value already set wins."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def evaluate(scorer: RunLM, tasks: Sequence[str], num_fewshot: int | None = None, limit: int | None = None,
             include_path: str | os.PathLike[str] | None = None, seed: int = 0,
             bootstrap_iters: int = 100_000) -> dict[str, Any]:
    """lm_eval.simple_evaluate's results for `tasks` (names known to lm-eval, or defined by YAML files under
    `include_path`); ValueError naming a task lm-eval does not know. `bootstrap_iters`: resamples for the
    metrics' standard errors (lm-eval's default; 0 skips them)."""
    offline()
    import lm_eval
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=None if include_path is None else str(include_path))
    unknown = [t for t in tasks if t not in manager.all_tasks]
    if unknown:
        raise ValueError(f"--tasks {', '.join(unknown)}: not a task lm-eval knows ({len(manager.all_tasks)} known; "
                         f"--include-path DIR adds YAML tasks of your own)")
    return lm_eval.simple_evaluate(model=harness_lm(scorer), tasks=list(tasks), num_fewshot=num_fewshot,
                                   limit=limit, task_manager=manager, bootstrap_iters=bootstrap_iters,
                                   log_samples=False, random_seed=seed, numpy_random_seed=seed,
                                   torch_random_seed=seed, fewshot_random_seed=seed)


def task_metrics(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """{task: {metric: value}} of simple_evaluate's results (numbers only; 'acc,none' -> 'acc')."""
    table: dict[str, dict[str, float]] = {}
    for task, metrics in results.get("results", {}).items():
        row = {}
        for key, value in metrics.items():
            name, _, flt = key.partition(",")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                row[name if flt in ("", "none") else key] = float(value)
        table[task] = row
    return table


def record(run_dir: str | Path, metrics: dict[str, dict[str, float]], **info: Any) -> Path:
    """Merge `metrics` (keyed by task) with `info` into `<run>/harness.json`, atomically; returns its path."""
    from falcon_lab.runs import atomic_write_text

    path = Path(run_dir) / RESULTS_FILE
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    for task, row in metrics.items():
        data[task] = {**row, **info}
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
    return path


def lm_eval_version() -> str | None:
    """The installed lm-eval's version, or None without it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lm_eval")
    except PackageNotFoundError:
        return None


MISSING = "lm-evaluation-harness is not installed; accepted: pip install 'falcon-lab[eval]' (lm-eval)"

