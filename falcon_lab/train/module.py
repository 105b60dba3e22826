"""The LightningModule: next-token cross-entropy on labelled positions, AdamW, warm-up + cosine.

The loss of a step is the mean over every labelled token of the global batch (all ranks), so that
R ranks of b rows compute exactly the gradient one process of R·b rows would, even when ranks hold
different numbers of labelled tokens (addition targets vary in length).

With `train.accumulate` N > 1 the module optimises manually: one training_step per optimiser step
takes the rank's whole batch, counts its labelled tokens across ranks first, then runs N micro-batch
forward/backward passes, each loss divided by that global count, with DDP's gradient all-reduce held
back until the last one. The summed gradient is the N = 1 gradient up to float rounding; clipping,
the non-finite checks, the optimiser and the schedule then step once, as the automatic path does.

With `train.ema` d > 0 the module keeps an exponential moving average of the model's weights, a copy of the
LanguageModel updated after every optimiser step t = 1, 2, … as A ← d_t A + (1 − d_t) W with
d_t = min(d, (1 + t) / (10 + t)) (one fused lerp on the device, nothing read back), saved in the checkpoints
beside the weights (`ema_state_dict`) so a resumed run goes on with the same average. `evaluated_model()` is what every evaluation reads: the average
when it is on, the trained weights otherwise.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

from falcon_lab.config import RunConfig, from_dict, to_dict
from falcon_lab.train import graphs
from falcon_lab.task import task_of
from falcon_lab.train.data import seq_len, vocab_size
from falcon_lab.train.optim import make_optimizer
from falcon_lab.mixers import LanguageModel, LMConfig, PositionsConfig
from falcon_lab.tasks.addition import IGNORE_INDEX, suffix_accuracy


class NonFiniteError(RuntimeError):
    """The loss or the gradient norm became NaN or infinite; names the step."""

    def __init__(self, what: str, step: int, value: float) -> None:
        super().__init__(f"the {what} is {value} at step {step}; the run stopped before applying that step")
        self.what, self.step, self.value = what, step, value


def lm_config(cfg: RunConfig) -> Any:
    """The mixers' LMConfig for this run."""
    m = cfg.model
    return LMConfig(vocab_size=vocab_size(cfg), d_model=m.d_model, n_layers=m.n_layers, n_heads=m.n_heads,
                    mixer=cfg.mixer, mixer_options=dict(m.mixer_options), mup=m.mup, positions=positions(cfg))


def positions(cfg: RunConfig) -> PositionsConfig | None:
    """The model's input features for this run, the task's (``Task.model_inputs``: addition's digit positions and
    isolated samples); None without them."""
    return task_of(cfg.task).model_inputs(cfg)


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy over labelled positions (fp32) and their count."""
    loss = F.cross_entropy(logits.float().flatten(0, -2), labels.flatten(), ignore_index=IGNORE_INDEX,
                           reduction="sum")
    return loss, (labels != IGNORE_INDEX).sum()


class LabModule(pl.LightningModule):
    """A LanguageModel from `mixers` trained as the RunConfig says."""

    def __init__(self, config: RunConfig | dict[str, Any]) -> None:
        super().__init__()
        cfg = config if isinstance(config, RunConfig) else from_dict(config)
        self.cfg = cfg
        self.save_hyperparameters({"config": to_dict(cfg)})
        self.model = LanguageModel(lm_config(cfg))
        self.automatic_optimization = cfg.train.accumulate == 1
        self.last_loss: torch.Tensor | None = None
        self.last_grad_norm: torch.Tensor | None = None
        self.last_lr = 0.0
        self.val_metrics: dict[str, float] = {}
        self.shown: dict[str, float] = {}  # the progress line's training figures, host values of the last logged step
        self._graphed_shape: tuple[int, ...] | None = None
        self._first_bad: torch.Tensor | None = None
        self._bad_now: torch.Tensor | None = None
        self._checked = -1

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        graphed = self.__dict__.get("_graphed_model")
        if self.training and graphed is not None and tuple(input_ids.shape) == self._graphed_shape:
            return graphed(input_ids)
        if self.training and self.cfg.train.compile:
            return self._compiled()(input_ids)
        return self.model(input_ids) if self.training else self.evaluated_model()(input_ids)

    def evaluated_model(self) -> LanguageModel:
        """The model evaluations read: the weights' moving average with `train.ema`, else the model itself."""
        ema = self.__dict__.get("_ema_model")
        return self.model if ema is None else ema

    def _ema(self) -> LanguageModel | None:
        """The moving average's model (made from the current weights at its first use), None with it off.
        Kept out of the module tree, so the optimiser, DDP and the state dict's keys see only the model."""
        if not self.cfg.train.ema:
            return None
        ema = self.__dict__.get("_ema_model")
        if ema is None:
            ema = copy.deepcopy(self.model).requires_grad_(False)
            self.__dict__["_ema_model"] = ema
        return ema

    def _update_ema(self, t: int) -> None:
        """Fold the weights after optimiser step t (1, 2, …) into the average."""
        ema = self._ema()
        if ema is None:
            return
        decay = min(self.cfg.train.ema, (1 + t) / (10 + t))
        ours = [p for p in ema.parameters()]
        theirs = [p.detach() for p in self.model.parameters()]
        torch._foreach_lerp_(ours, theirs, 1.0 - decay)
        buffers = [(a, b) for a, b in zip(ema.buffers(), self.model.buffers()) if a.is_floating_point()]
        if buffers:
            torch._foreach_copy_([a for a, _ in buffers], [b for _, b in buffers])

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        # .to(), .cpu(), .cuda() and the like move the average with the model
        super()._apply(fn, recurse)
        ema = self.__dict__.get("_ema_model")
        if ema is not None:
            ema._apply(fn, recurse)
        return self

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        ema = self.__dict__.get("_ema_model")
        if ema is not None:
            checkpoint["ema_state_dict"] = {k: v.detach().clone() for k, v in ema.state_dict().items()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("ema_state_dict")
        if state is not None and self.cfg.train.ema:
            self._ema().load_state_dict(state)

    def on_train_start(self) -> None:
        """Start the weights' moving average (with train.ema) unless a checkpoint brought it back. With
        train.cuda_graphs, capture the training forward and backward for the run's batch shape
        (falcon_lab/train/graphs.py); a model that cannot be captured trains without them (eagerly, or compiled
        with train.compile), and the run says why."""
        ema = self._ema()
        if ema is not None:
            ema.to(self.device)
        if not self.cfg.train.cuda_graphs:
            return
        rows = self.cfg.train.batch_size // self.trainer.world_size // self.cfg.train.accumulate
        shape = (rows, seq_len(self.cfg))
        # With train.compile the compiled forward is captured: its warm-up passes compile it, and the
        # graphs then replay the fused kernels and the mixers' own kernels alike.
        compiled = self.cfg.train.compile
        model = self._compiled() if compiled else self.model
        try:
            self.__dict__["_graphed_model"] = graphs.capture(model, shape, str(self.trainer.precision), self.device)
            self._graphed_shape = shape
            print(f"cuda graphs: {'compiled ' if compiled else ''}training forward and backward captured for "
                  f"batches of {shape}", flush=True)
        except Exception as err:  # an optimisation: without it the run is the same, only slower
            print(f"cuda graphs: not captured ({type(err).__name__}: {str(err).splitlines()[0][:200]}); "
                  f"training {'compiled, without them' if compiled else 'eagerly'}", flush=True)

    def _compiled(self) -> Any:
        """The model through torch.compile, made once; kept out of the module tree (and so out of the
        state dict, whose keys stay those of the eager model)."""
        compiled = self.__dict__.get("_compiled_model")
        if compiled is None:
            compiled = torch.compile(self.model)
            self.__dict__["_compiled_model"] = compiled
        return compiled

    def _reduce(self, value: torch.Tensor, op: str) -> torch.Tensor:
        # One process: the value as is; DDP: an all-reduce over ranks.
        return self.trainer.strategy.reduce(value, reduce_op=op)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if not self.automatic_optimization:
            return self._accumulated_step(batch)
        input_ids, labels = batch
        loss_sum, count = token_loss_sum(self(input_ids), labels)
        global_count = self._reduce(count.float().clone(), "sum").clamp_min(1.0)
        # DDP averages gradients over ranks, hence the factor world_size.
        loss = loss_sum * (self.trainer.world_size / global_count)
        self._record(self._reduce(loss.detach().clone(), "mean"))
        return loss

    def _record(self, mean: torch.Tensor) -> None:
        # Asking whether a GPU value is finite waits for the GPU: the check runs on the device in
        # on_before_optimizer_step and is read back at the next check_finite(). fp16 loss scaling skips
        # non-finite gradients by itself, so under 16-mixed only the loss is checked, here.
        if self.trainer.precision == "16-mixed" and not torch.isfinite(mean):
            raise NonFiniteError("loss", self.global_step + 1, mean.item())
        self.last_loss = mean  # read on the host only at the logged steps (callbacks.MetricsLogger); not through
        # self.log, whose progress-bar metrics Lightning reads back at the end of every later step (a wait for the GPU)

    def _accumulated_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        input_ids, labels = batch
        parts = self.cfg.train.accumulate
        optimizer = self.optimizers()
        optimizer.zero_grad()
        count = (labels != IGNORE_INDEX).sum()
        # The whole global batch's count, before any micro-batch: every part divides by the same number.
        scale = self.trainer.world_size / self._reduce(count.float().clone(), "sum").clamp_min(1.0)
        # DDP all-reduces gradients only in the last backward pass; the others add up locally.
        no_sync = getattr(self.trainer.strategy, "block_backward_sync", nullcontext)
        total = torch.zeros((), device=self.device)
        # tensor_split: rows in `parts` near-equal parts, whatever their number (isolated samples vary it).
        for i, (ids, lab) in enumerate(zip(input_ids.tensor_split(parts), labels.tensor_split(parts))):
            with nullcontext() if i == parts - 1 else no_sync():
                loss = token_loss_sum(self(ids), lab)[0] * scale
                self.manual_backward(loss)
            total += loss.detach()
        # Checked before the optimiser step, so a non-finite loss is never applied.
        self._record(self._reduce(total, "mean"))
        optimizer.step()
        self.lr_schedulers().step()
        self._update_ema(self.global_step)  # counted by the manual optimiser's step
        return total

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Flag a non-finite loss or (all-reduced, unscaled) gradient norm, then clip to optim.grad_clip.

        The flag stays on the device: the fused AdamW skips a flagged step by itself (its `found_inf`),
        and `check_finite()` reads the flag back where the run synchronises anyway (a logged step, a
        checkpoint, the end), so no step waits for the GPU just to be checked."""
        params = [p for p in self.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        # fp16 loss scaling produces inf gradients by design and skips those steps itself.
        if self.trainer.precision != "16-mixed":
            self._flag_non_finite(norm)
            optimizer.found_inf = self._bad_now
        if self.cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grads_with_norm_(params, self.cfg.optim.grad_clip, norm)
        self.last_grad_norm = norm
        self.last_lr = optimizer.param_groups[0]["lr"] / optimizer.param_groups[0].get("lr_mult", 1.0)

    def _flag_non_finite(self, norm: torch.Tensor) -> None:
        """Record, on the device, the first step whose loss or gradient norm is not finite."""
        loss = self.last_loss.float() if self.last_loss is not None else torch.zeros((), device=norm.device)
        bad_loss = ~torch.isfinite(loss)
        bad = bad_loss | ~torch.isfinite(norm)
        if self._first_bad is None or self._first_bad.device != norm.device:
            # [step, what (0 loss, 1 gradient norm), value]; step 0 = none yet
            self._first_bad = torch.zeros(3, dtype=torch.float64, device=norm.device)
        now = torch.stack([torch.full((), float(self.global_step + 1), dtype=torch.float64, device=norm.device),
                           (~bad_loss).double(), torch.where(bad_loss, loss, norm.float()).double()])
        first = bad & (self._first_bad[0] == 0)
        self._first_bad = torch.where(first, now, self._first_bad)
        self._bad_now = bad.float()

    def check_finite(self) -> None:
        """Raise NonFiniteError naming the first step whose loss or gradient norm was NaN or infinite.

        Waits for the device once per step at most; the flagged step itself was never applied."""
        step = self.global_step
        if self._first_bad is None or self._checked == step:
            return
        self._checked = step
        at, what, value = self._first_bad.tolist()
        if at:
            raise NonFiniteError("loss" if what == 0 else "gradient norm", int(at), value)

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        # Lightning counts the step after this hook; the average is updated before any callback of the
        # step evaluates or saves it
        self._update_ema(self.global_step + 1)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        t = self.cfg.train
        step = self.global_step
        if step % t.log_every == 0 or step % t.ckpt_every == 0 or step >= t.max_steps:
            self.check_finite()

    def on_train_end(self) -> None:
        self.check_finite()

    def configure_optimizers(self) -> Any:
        # Lightning unscales fp16 gradients before on_before_optimizer_step only for unfused optimisers
        fused = self._trainer is None or self._trainer.precision != "16-mixed"
        optimizer, schedule = make_optimizer(self.model, self.cfg.optim, self.cfg.train.max_steps, fused=fused)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def on_validation_epoch_start(self) -> None:
        self._val = torch.zeros(4, dtype=torch.float64, device=self.device)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        input_ids, labels = batch
        logits = self(input_ids)
        loss_sum, count = token_loss_sum(logits, labels)
        acc = suffix_accuracy(logits, labels)
        rows = torch.tensor(float(len(labels)), dtype=torch.float64, device=self.device)
        self._val += torch.stack([loss_sum.double(), count.double(), acc.whole_correct.sum().double(), rows])

    def on_validation_epoch_end(self) -> None:
        loss_sum, count, right, rows = self._val.tolist()
        self.val_metrics = {"val_loss": loss_sum / max(count, 1.0), "val_acc": right / max(rows, 1.0)}
        # Every rank evaluates the whole validation set, so the all-reduced mean changes nothing.
        self.log("val_loss", self.val_metrics["val_loss"], prog_bar=True, logger=False, sync_dist=True)
        self.log("val_acc", self.val_metrics["val_acc"], prog_bar=True, logger=False, sync_dist=True)
