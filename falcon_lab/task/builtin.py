"""The lab's own tasks, each declared once: addition, random tokens, FineWeb-Edu, and the synthetic tasks of
``falcon_lab.tasks.synthetic`` (one ``LengthTask`` for each name of its ``TASK_NAMES``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from falcon_lab.task import Batch, LengthTask, Task, register_task
from falcon_lab.typed import ConfigError

if TYPE_CHECKING:
    from falcon_lab.config import RunConfig
    from falcon_lab.mixers import PositionsConfig
    from falcon_lab.runs import RunDir


class Addition(Task):
    """Variable-length addition (the paper's track): operands of ``data.widths`` digits, the sum reversed."""

    name = "addition"
    summary = "a+b= with the reversed sum as target, operands of data.widths digits"
    options = ("widths", "seq_len", "packing", "curriculum", "start_width", "ramp_steps", "val_per_length")
    curriculum_range = "data.widths"
    packs = True
    evaluates = True
    model_options = ("model.abacus", "model.isolate_samples")

    def check(self, cfg: RunConfig) -> None:
        from falcon_lab.tasks.addition import positions_needed

        d = cfg.data
        hi = d.widths[1]
        need = positions_needed(hi)
        if d.packing and d.seq_len is None:
            raise ConfigError(f"data.packing needs data.seq_len (>= {need} for widths up to {hi})")
        if d.seq_len is not None and d.seq_len < need:
            raise ConfigError(f"data.seq_len={d.seq_len} is too short for width {hi}; accepted: >= {need}")

    def vocab_size(self, cfg: RunConfig) -> int:
        from falcon_lab.tasks.addition import VOCAB_SIZE

        return VOCAB_SIZE

    def seq_len(self, cfg: RunConfig) -> int:
        from falcon_lab.tasks.addition import positions_needed

        return positions_needed(cfg.data.widths[1])

    def train_widths(self, cfg: RunConfig, step: int) -> tuple[int, int]:
        """The width range of ``step``'s batch: data.widths, or the curriculum's range at ``step``."""
        from falcon_lab.tasks.addition.curriculum import linear_widths

        d = cfg.data
        if d.curriculum == "linear":
            return linear_widths(step, d.widths, d.start_width, d.ramp_steps)
        return d.widths

    def train_batch(self, cfg: RunConfig, step: int, rank: int, world_size: int) -> Batch:
        from falcon_lab.train.data import seq_len
        from falcon_lab.tasks.addition import make_batch

        # seq_len stays that of the widest width, so every step's batch has the same shape
        batch = make_batch(cfg.train.seed, step, cfg.train.batch_size // world_size, self.train_widths(cfg, step),
                           seq_len(cfg), cfg.data.packing, rank=rank)
        return batch.input_ids, batch.labels

    def val_batches(self, cfg: RunConfig) -> list[Batch]:
        from falcon_lab.tasks.addition import generate_records, teacher_forced_batch

        size = cfg.train.batch_size
        records = list(generate_records("val", cfg.data.widths, cfg.data.val_per_length, cfg.train.seed))
        return [teacher_forced_batch(records[i:i + size]) for i in range(0, len(records), size)]

    def evaluations(self, cfg: RunConfig, run: RunDir) -> list[Any]:
        from falcon_lab.eval.callback import AdditionEvaluation

        e = cfg.eval
        return [AdditionEvaluation(run, cfg.train.val_every, e.n_per_length, e.free_per_length, e.seed,
                                   widths=e.widths, held_out_from=e.held_out_from, ties=e.best_ties)]

    def outcome_scores(self, cfg: RunConfig) -> tuple[tuple[str, str], ...]:
        """The run's validation and held-out widths (the paper's 1-32 and 33-48), and the first and last
        held-out width."""
        e = cfg.eval
        first, last = e.held_out_from, e.widths[1]
        return (("best_val_acc", f"val{e.widths[0]}-{first - 1}"), ("best_ood_mean", f"mean{first}-{last}"),
                (f"best_acc@{first}", f"@{first}"), (f"best_acc@{last}", f"@{last}"))

    def model_inputs(self, cfg: RunConfig) -> PositionsConfig | None:
        """Digit positions (``model.abacus``) and isolated samples (``model.isolate_samples``)."""
        from falcon_lab.mixers import PositionsConfig
        from falcon_lab.tasks.addition.vocab import DIGIT_0, EOS, EQUALS

        m = cfg.model
        features: dict[str, Any] = {}
        if m.abacus is not None:
            # Indices for answers of up to max(128, twice the trained width) digits at evaluation, past any offset.
            features = {"abacus": m.abacus, "abacus_size": m.abacus + 2 + max(128, 2 * cfg.data.widths[1]),
                        "digit_ids": (DIGIT_0, DIGIT_0 + 9), "answer_marker": EQUALS,
                        "abacus_eval_offset": cfg.eval.abacus_offset, "abacus_ahead": m.abacus_ahead,
                        "abacus_embed": m.abacus_embed, "abacus_shift_frac": float(m.abacus_shift_frac),
                        # counted in forward passes: a step is train.accumulate of them
                        "abacus_start": m.abacus_start * cfg.train.accumulate}
        if m.isolate_samples:
            # The packed rows stay: attention masks them, the recurrent mixers restart at each sample, any other
            # mixer mixes each sample on a row of its own (falcon_lab.mixers.positions).
            features["sample_end"] = EOS
        return PositionsConfig(**features) if features else None


class RandomTokens(Task):
    """Uniform random tokens: a throughput and plumbing task with nothing to validate."""

    name = "random"
    summary = "uniform random tokens over data.vocab_size ids"
    options = ("vocab_size", "seq_len")

    def seq_len(self, cfg: RunConfig) -> int:
        from falcon_lab.config import DEFAULT_RANDOM_SEQ_LEN

        return DEFAULT_RANDOM_SEQ_LEN

    def train_batch(self, cfg: RunConfig, step: int, rank: int, world_size: int) -> Batch:
        from falcon_lab.train.data import seq_len
        from falcon_lab.tasks.random_tokens import random_token_batch

        # The random stream is drawn per step for the global batch, then sliced, so that its rows do
        # not depend on the number of ranks either.
        local = cfg.train.batch_size // world_size
        ids, labels = random_token_batch(self.vocab_size(cfg), seq_len(cfg), cfg.train.batch_size, cfg.train.seed,
                                         step)
        rows = slice(rank * local, (rank + 1) * local)
        return ids[rows].contiguous(), labels[rows].contiguous()


class FineWeb(Task):
    """Language modelling on token shards (``lab data fineweb``), validated on the first windows of its val shard."""

    name = "fineweb"
    summary = "next-token prediction on the token shards in data.path"
    options = ("path", "vocab_size", "seq_len", "val_windows")

    def check(self, cfg: RunConfig) -> None:
        if not cfg.data.path:
            raise ConfigError("task 'fineweb' needs data.path, the folder of token shards made by `lab data fineweb`")

    seq_len = RandomTokens.seq_len

    def train_batch(self, cfg: RunConfig, step: int, rank: int, world_size: int) -> Batch:
        from falcon_lab.train.data import fineweb_shards, seq_len
        from falcon_lab.tasks.fineweb import train_batch

        shards = fineweb_shards(cfg.data.path, "train", seq_len(cfg), self.vocab_size(cfg))
        return train_batch(shards, cfg.train.batch_size, cfg.train.seed, step, rank, world_size)

    def val_batches(self, cfg: RunConfig) -> list[Batch]:
        from falcon_lab.train.data import fineweb_shards, seq_len
        from falcon_lab.tasks.fineweb import val_windows

        shards = fineweb_shards(cfg.data.path, "val", seq_len(cfg), self.vocab_size(cfg))
        windows = val_windows(shards, cfg.data.val_windows)
        size = cfg.train.batch_size
        return [shards.rows(windows[i:i + size]) for i in range(0, len(windows), size)]


class MQARTask(LengthTask):
    """Multi-query associative recall: its sequences need ``data.tokens_per_pair`` tokens for one pair."""

    def check(self, cfg: RunConfig) -> None:
        d = cfg.data
        try:
            task = self.generator(cfg)
        except ValueError as err:
            raise ConfigError(f"data.{err}") from None
        if min(d.lengths[0], d.test_lengths[0]) < task.min_length:
            key = "data.lengths" if d.lengths[0] < task.min_length else "data.test_lengths"
            raise ConfigError(f"{key} {list(getattr(d, key[5:]))} starts below {task.min_length}: an MQAR sequence "
                              f"needs data.tokens_per_pair={d.tokens_per_pair} tokens for one pair; accepted: "
                              f"lengths >= {task.min_length} (the preset mqar-tiny trains on 16-32)")
        super().check(cfg)


class PermutationTask(LengthTask):
    """Composition of permutations: ``data.group`` is S5 or A5."""

    def check(self, cfg: RunConfig) -> None:
        from falcon_lab.tasks.synthetic import GROUPS

        if cfg.data.group not in GROUPS:
            raise ConfigError(f"data.group={cfg.data.group!r} is not accepted; accepted: {', '.join(GROUPS)}")
        super().check(cfg)


def _synthetic(name: str):
    def make(data: Any):
        from falcon_lab.tasks.synthetic import make_task

        return make_task(name, vocab_size=data.vocab_size, tokens_per_pair=data.tokens_per_pair, group=data.group)
    return make


def _length_tasks() -> list[LengthTask]:
    """One LengthTask for each synthetic task of ``falcon_lab.tasks.synthetic`` (its TASK_NAMES: the one list)."""
    from falcon_lab.tasks import SYNTHETIC_TASK_NAMES as TASK_NAMES

    kinds: dict[str, tuple[type[LengthTask], dict[str, Any]]] = {
        "mqar": (MQARTask, {"summary": "multi-query associative recall (zoology)",
                            "options": ("lengths", "test_lengths", "vocab_size", "tokens_per_pair"),
                            "describe": lambda d: f", vocabulary {d.vocab_size}, one pair per {d.tokens_per_pair} "
                                                  f"tokens"}),
        "parity": (LengthTask, {"summary": "running parity of a bit string"}),
        "permutation": (PermutationTask, {"summary": "composition of permutations of five elements",
                                          "options": ("lengths", "test_lengths", "group"),
                                          "describe": lambda d: f", group {d.group}"}),
    }
    return [kinds.get(name, (LengthTask, {}))[0](name, _synthetic(name), **kinds.get(name, (None, {}))[1])
            for name in TASK_NAMES]


for _task in (Addition(), RandomTokens(), FineWeb(), *_length_tasks()):
    register_task(_task)
