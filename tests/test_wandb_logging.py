"""W&B never blocks or breaks a run: without a reachable server or a well-formed key the run is
written offline, decided within seconds, with one log line that says why and how to upload later;
finishing never starts a run, and a run that cannot be finished is a warning."""

from __future__ import annotations

import logging
import os
import time

import pytest

from isotune.tracking.wandb_logging import finish_wandb_runs, wandb_logger
from isotune.tracking.wandb_status import api_key_problem
from tests.helpers.network import closed_port_url

KEY = "0123456789abcdef" * 2 + "01234567"  # the shape of a real key: 40 characters


@pytest.fixture
def wandb_env(monkeypatch, tmp_path):
    """No W&B settings and no `wandb login` (HOME without a .netrc); the server a closed port."""
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_IDENTITY_TOKEN_FILE", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("WANDB_BASE_URL", closed_port_url())
    return monkeypatch


def make_logger(save_dir, caplog):
    """A logger as logger=wandb builds it, its log records, and the seconds it took."""
    start = time.monotonic()
    with caplog.at_level(logging.INFO, logger="isotune.tracking.wandb_logging"):
        logger = wandb_logger(str(save_dir), "minilm", "rte", "none", seed=1)
    records = [r for r in caplog.records if r.name == "isotune.tracking.wandb_logging"]
    return logger, records, time.monotonic() - start


@pytest.mark.parametrize(
    "key",
    [
        KEY,
        KEY[:39],
        "local-" + KEY,
        "local-" + KEY[:39],
        KEY[:20] + "-" + KEY[:20],  # the part after the first dash is the secret
        KEY[:39] + "!",
        "header.payload.signature",  # a JWT
        "a.b",
        "",
    ],
)
def test_api_key_rule_is_wandbs_own(key):
    from wandb.sdk.lib.wbauth.validation import check_api_key

    assert (api_key_problem(key) is None) == (check_api_key(key) is None)


def test_unreachable_server_means_offline_at_once_with_one_warning(wandb_env, tmp_path, caplog):
    wandb_env.setenv("WANDB_API_KEY", KEY)
    logger, records, seconds = make_logger(tmp_path, caplog)
    assert seconds < 5
    assert logger._wandb_init["mode"] == "offline"
    assert logger._wandb_init["settings"] == {"silent": True}
    (record,) = records
    assert record.levelno == logging.WARNING
    runs = f"{tmp_path}/wandb/offline-run-*"
    message = record.getMessage()
    assert f"the W&B server {os.environ['WANDB_BASE_URL']} cannot be reached" in message
    assert f"written to {runs}; upload it later with `wandb sync {runs}`" in message


@pytest.mark.parametrize("source", ["WANDB_API_KEY", "netrc"])
def test_a_malformed_key_means_offline_and_names_the_fix(wandb_env, tmp_path, caplog, source):
    if source == "WANDB_API_KEY":
        wandb_env.setenv("WANDB_API_KEY", "not-a-key")
    else:
        host = os.environ["WANDB_BASE_URL"].removeprefix("http://")
        (tmp_path / "home" / ".netrc").write_text(f"machine {host}\n  login user\n  password x\n")
    logger, (record,), _ = make_logger(tmp_path, caplog)
    assert logger._wandb_init["mode"] == "offline" and record.levelno == logging.WARNING
    named = "WANDB_API_KEY" if source == "WANDB_API_KEY" else f"key in {tmp_path}/home/.netrc"
    assert f"{named} is not a W&B API key (it must have 40 or more characters" in (
        record.getMessage()
    )
    assert "`wandb login --relogin` or a correct WANDB_API_KEY" in record.getMessage()


def test_wandb_mode_online_without_a_key_says_so_and_runs_offline(wandb_env, tmp_path, caplog):
    wandb_env.setenv("WANDB_MODE", "online")
    logger, (record,), _ = make_logger(tmp_path, caplog)
    assert logger._wandb_init["mode"] == "offline" and record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        "W&B offline: WANDB_MODE=online is set, but there is no WANDB_API_KEY and no `wandb "
        "login` credentials; run `wandb login` or set WANDB_API_KEY to upload. The run is "
        "written to "
    )


def test_without_any_key_offline_is_the_default_and_only_an_info_line(wandb_env, tmp_path, caplog):
    logger, (record,), _ = make_logger(tmp_path, caplog)
    assert logger._wandb_init["mode"] == "offline" and record.levelno == logging.INFO


def test_wandb_mode_disabled_stays_disabled(wandb_env, tmp_path, caplog):
    wandb_env.setenv("WANDB_MODE", "disabled")
    logger, records, _ = make_logger(tmp_path, caplog)
    assert logger._wandb_init["mode"] == "disabled" and records == []


def test_finishing_a_run_that_never_started_starts_nothing(wandb_env, tmp_path, caplog):
    import wandb

    def no_init(**kwargs):
        raise AssertionError("wandb.init called")

    wandb_env.setattr(wandb, "init", no_init)
    logger, _, _ = make_logger(tmp_path, caplog)
    finish_wandb_runs([logger], {"status": "failed"})
    assert logger._experiment is None and not (tmp_path / "wandb").exists()


def test_a_run_that_cannot_be_finished_is_one_warning(wandb_env, tmp_path, caplog):
    class BrokenRun:
        @property
        def summary(self):
            raise RuntimeError("context deadline exceeded")

    logger, _, _ = make_logger(tmp_path, caplog)
    logger._experiment = BrokenRun()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="isotune.tracking.wandb_logging"):
        finish_wandb_runs([logger], {"status": "failed"})
    (record,) = caplog.records
    assert record.getMessage() == (
        f"W&B: could not finish the run in {tmp_path} (RuntimeError: context deadline "
        "exceeded); what it logged so far stays there."
    )


def test_an_offline_run_with_an_unreachable_server_is_written_quietly(
    wandb_env, tmp_path, caplog, capfd
):
    wandb_env.setenv("WANDB_API_KEY", KEY)
    logger, _, _ = make_logger(tmp_path, caplog)
    start = time.monotonic()
    logger.log_metrics({"val/accuracy": 0.5}, step=0)
    finish_wandb_runs([logger], {"status": "completed", "best": {"accuracy": 0.5}})
    assert time.monotonic() - start < 20
    (record,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    assert b"best/accuracy" in record.read_bytes()
    assert "WANDB_MODE" not in os.environ  # Lightning's offline switch would have set it
    printed = capfd.readouterr()
    assert "wandb online" not in printed.err + printed.out
    assert "WANDB_MODE=online" not in printed.err + printed.out
