"""`lab bench step`: the step anatomy of a tiny run on the CPU, and its refusals."""

from __future__ import annotations

import csv
from pathlib import Path

from typer.testing import CliRunner

from falcon_lab.cli import app


def test_step_anatomy_times_each_stage_and_writes_its_table(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "step", "--mixers", "transformer,falcon-1a", "--preset", "tiny",
                                      "--steps", "2", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((tmp_path / "step.csv").open()))
    assert [r["mixer"] for r in rows] == ["transformer", "falcon-1a"]
    for r in rows:
        stages = [float(r[k]) for k in ("loop_ms", "data_ms", "fwd_ms", "bwd_ms", "opt_ms")]
        assert all(s > 0 for s in stages)
        assert int(r["params"]) > 0 and float(r["tokens_per_s"]) > 0
        assert float(r["tflop"]) > 0 and r["mfu"] == ""  # no peak for a CPU: no utilisation claimed
    assert "| transformer |" in (tmp_path / "step.md").read_text()


def test_an_unknown_mixer_or_no_steps_is_refused_in_one_line(tmp_path: Path) -> None:
    for args, message in ((["--mixers", "nope"], "lab bench step: unknown mixer nope; accepted: "),
                          (["--steps", "0"], "lab bench step: --steps must be >= 1, got 0"),
                          (["--mixers", "transformer,falcon-1a", "--set", "model.n_heads=7"],
                           "lab bench step: model.d_model=")):
        result = CliRunner().invoke(app, ["bench", "step", *args, "--out", str(tmp_path / "out")])
        assert result.exit_code == 2 and result.output.startswith(message), result.output
        assert result.output.count("\n") == 1 and not (tmp_path / "out").exists()  # nothing written


def test_a_campaign_preset_times_each_row_as_the_campaign_trains_it(monkeypatch, tmp_path: Path) -> None:
    """`--preset same-time` is that table's configuration of each row (lab train's reading of the name)."""
    from falcon_lab.bench import step

    seen = {}

    def measure(cfg, steps, trace=None):
        seen[cfg.mixer] = cfg
        return {"params": 1, "tokens_per_s": 1.0, "loop_ms": 1.0}

    monkeypatch.setattr(step, "measure", measure)
    step.run(["retnet", "falcon-1.3"], preset="same-time", task="addition", steps=1, out=tmp_path, echo=lambda _: None)
    assert seen["retnet"].model.mixer_options == {"rope": False}
    assert seen["falcon-1.3"].model.mixer_options["alignment"] == "same_time"
    assert all(c.model.isolate_samples and c.model.abacus == 64 for c in seen.values())


def test_each_row_is_compiled_afresh_not_after_the_rows_before_it(monkeypatch, tmp_path: Path) -> None:
    """Rows share one process: Dynamo's caches are reset before each, so a ninth row's frames do not hit the
    recompile limit that eight rows of one function reach (and run eagerly, mismeasured)."""
    import torch

    from falcon_lab.bench import step

    @torch.compile(backend="eager")
    def forward(x, name: str):  # one function every row runs, guarded on the row's name
        return x + len(name)

    frames = []

    def measure(cfg, steps, trace=None):
        forward(torch.ones(1), cfg.mixer)
        frames.append(len(torch._dynamo.eval_frame._debug_get_cache_entry_list(forward._torchdynamo_orig_callable)))
        return {"params": 1, "tokens_per_s": 1.0, "loop_ms": 1.0}

    monkeypatch.setattr(step, "measure", measure)
    step.run(["transformer", "falcon-1a", "retnet"], preset="tiny", task="addition", steps=1, out=tmp_path,
             echo=lambda _: None)
    assert frames == [1, 1, 1], frames


def test_samples_by_id_or_packed_is_set_for_every_row_and_recorded(monkeypatch, tmp_path: Path) -> None:
    """`--samples by-id` runs every row with `layers.SAMPLE_IDS` on (`packed`: off), the process's own setting back
    after; `by_id` says whether the row's isolated samples did reach its kernels by id (not the transformer's,
    which masks them)."""
    from falcon_lab.bench import step
    from falcon_lab.mixers import layers

    seen = []

    def measure(cfg, steps, trace=None):
        seen.append((cfg.mixer, layers.SAMPLE_IDS))
        return {"params": 1, "tokens_per_s": 1.0, "loop_ms": 1.0}

    monkeypatch.setattr(step, "measure", measure)
    monkeypatch.setattr(layers, "SAMPLE_IDS", False)
    for choice, on in (("by-id", True), ("packed", False)):
        out = tmp_path / choice
        result = CliRunner().invoke(app, ["bench", "step", "--mixers", "transformer,falcon-1a.3", "--preset",
                                          "same-time", "--samples", choice, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert seen[-2:] == [("transformer", on), ("falcon-1a.3", on)] and layers.SAMPLE_IDS is False
        rows = list(csv.DictReader((out / "step.csv").open()))
        assert [r["by_id"] for r in rows] == ["False", str(on)]
    result = CliRunner().invoke(app, ["bench", "step", "--samples", "ids", "--out", str(tmp_path / "no")])
    assert result.exit_code == 2 and result.output == "lab bench step: --samples must be packed or by-id, got ids\n"
    assert not (tmp_path / "no").exists()


def test_kernel_variants_are_set_for_the_rows_recorded_and_restored(tmp_path: Path) -> None:
    """--kernels sets the kernels' variants for every row (falcon_lab/kernels/variants.py), says them in step.md and
    leaves those before in force after; a variant that is not one is refused in one line, nothing written."""
    from falcon_lab.kernels import variants

    before = variants.current()
    result = CliRunner().invoke(app, ["bench", "step", "--mixers", "falcon-1a", "--preset", "tiny", "--steps", "1",
                                      "--kernels", "conv=tiles", "--kernels", "inverse=substitution",
                                      "--kernels", "launch=f1_grad:BK=32", "--kernels", "falcon3-glue=compiled",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert ("- kernels: conv=tiles, inverse=substitution, launch=f1_grad:BK=32, falcon3-glue=compiled"
            in (tmp_path / "step.md").read_text())
    assert variants.current() == before
    for word, said in (("conv=fast", "got 'fast'"), ("inverse=lu", "got 'lu'"), ("launch=f9:BK=1", "unknown kernel"),
                       ("falcon3-glue=jit", "got 'jit'"), ("colour=red", "expected NAME=VALUE")):
        result = CliRunner().invoke(app, ["bench", "step", "--mixers", "falcon-1a", "--preset", "tiny", "--kernels",
                                          word, "--out", str(tmp_path / "out")])
        assert result.exit_code == 2 and said in result.output, result.output
        assert result.output.count("\n") == 1 and not (tmp_path / "out").exists()
