"""The training benchmark (opgen.bench_training) in its quick mode, as CI runs it.

Each model trained 20 SGD steps with torch's norm modules and with opgen's, interleaved:
the loss curves agree within 1e-4 (f32), which is the correctness half of the benchmark;
the report holds a row per norm layer with positive times and the norms' share of the
step (its size is not tested: timing is the benchmark's job). A positive control: the same comparison between models whose norms differ only in
eps (1e-5 against 1e-2) does see the difference.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from opgen import bench_training as T  # noqa: E402

LOSS_TOLERANCE = 1e-4   # the bar for f32 over 20 steps


@pytest.mark.parametrize("model", ["unet", "transformer"])
def test_quick_training_gives_torchs_loss_curve_and_a_report(model):
    report = T.run_model(model, quick=True, steps=20, repeats=1)
    assert len(report.losses["torch"]) == len(report.losses["opgen"]) == 20
    assert report.max_loss_difference <= LOSS_TOLERANCE, report.losses
    assert report.losses["torch"][-1] != report.losses["torch"][0]          # it trained
    expected = {"unet": {"GroupNorm"}, "transformer": {"RMSNorm", "LayerNorm"}}[model]
    assert {row["module"] for row in report.layers} == expected
    assert all(row[f"{side} {phase} ms"] > 0 for row in report.layers
               for side in ("torch", "opgen") for phase in ("forward", "backward"))
    assert report.norm_share_of_torch_step > 0       # its size is a measurement (noisy here), not a test


def test_the_loss_comparison_sees_a_difference_in_the_norms(monkeypatch):
    """Positive control: 'opgen's' side built with torch's modules at eps 1e-2 must differ."""
    real = T.norm_classes

    def loose_eps(library):
        classes = real("torch")
        if library == "opgen":
            return {name: (lambda *a, cls=cls, **k: cls(*a, **{**k, "eps": 1e-2})) for name, cls in classes.items()}
        return classes
    monkeypatch.setattr(T, "norm_classes", loose_eps)
    report = T.run_model("unet", quick=True, steps=20, repeats=1)
    assert report.max_loss_difference > LOSS_TOLERANCE
