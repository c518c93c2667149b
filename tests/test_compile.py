"""compile=true: the encoder compiled in place (checkpoints keep their keys), or, where
torch.compile cannot run, one message naming the fix before anything trains."""

from __future__ import annotations

import pytest
import torch

from isotune.errors import IsotuneError
from isotune.model import compiling
from isotune.training.run import train


def test_where_compile_cannot_run_the_run_stops_at_start_naming_the_fix(
    train_config, tmp_path, monkeypatch
):
    def no_compiler(*args, **kwargs):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail")

    monkeypatch.setattr(compiling.torch, "compile", no_compiler)
    with pytest.raises(IsotuneError) as refused:
        train(train_config("compile=true"))
    assert str(refused.value) == (
        "compile=true: torch.compile cannot run on cpu here (InvalidCxxCompiler: No "
        f"working C++ compiler found). {compiling.FIX}"
    )
    assert not (tmp_path / "checkpoints").exists()
    assert not (tmp_path / "isotropy").exists()  # epoch 0 was not measured either


@pytest.mark.slow
def test_a_compiled_run_trains_and_keeps_the_checkpoint_keys(train_config, tmp_path):
    results = train(train_config("compile=true", "trainer.max_epochs=1"))
    assert results["status"] == "completed"
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert not any("_orig_mod" in key for key in saved)
    assert any(key.startswith("encoder.") for key in saved)
