"""Whether W&B can upload now, decided within seconds and without starting W&B: credentials,
their format, and the server's answer. Every tool that talks to W&B asks here first (training
runs, the sweep aggregate, the dashboards), so none of them ever waits on the network."""

from __future__ import annotations

import logging
import netrc
import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from isotune.tracking.network import reachable

WANDB_URL = "https://api.wandb.ai"  # wandb's default server; WANDB_BASE_URL names another
JWT = re.compile(r"[\w-]+\.[\w-]+\.[\w-]+")  # header.payload.signature, base64url


def api_key_problem(key: str) -> str | None:
    """Why W&B would reject ``key``'s format, or None: wandb 0.31's own rule
    (``wandb/sdk/lib/wbauth/validation.py: check_api_key``) restated. A JWT (three dot-separated
    base64url parts) passes; otherwise the secret, after an optional ``prefix-`` of on-prem keys,
    holds 40 or more letters, digits, underscores or dashes."""
    if not key:
        return "it is empty"
    if JWT.fullmatch(key):
        return None
    secret = key.split("-", 1)[-1]
    if not re.fullmatch(r"[\w-]+", secret):
        return "it may only hold letters, digits, underscores and dashes"
    if len(secret) < 40:
        return f"it must have 40 or more characters, has {len(secret)}"
    return None


def _api_key(base_url: str) -> tuple[str, str] | None:
    """The API key wandb would use and where it comes from: WANDB_API_KEY, else the netrc entry
    ``wandb login`` writes for the server."""
    if key := os.environ.get("WANDB_API_KEY"):
        return key, "WANDB_API_KEY"
    path = Path(os.environ.get("NETRC") or "~/.netrc").expanduser()
    server = urlsplit(base_url)
    try:
        found = netrc.netrc(path)
    except (OSError, netrc.NetrcParseError):
        return None
    entry = found.authenticators(server.netloc) or found.authenticators(server.hostname or "")
    return (entry[2], f"the `wandb login` key in {path}") if entry and entry[2] else None


def offline_reason() -> tuple[int, str] | None:
    """None when W&B can upload now, decided within seconds; else a log level and why not: INFO
    where offline is what the user chose (WANDB_MODE) or the default (no key), WARNING with the fix
    where they meant to upload."""
    mode = os.environ.get("WANDB_MODE", "")
    if mode in ("offline", "disabled", "dryrun"):
        return logging.INFO, f"WANDB_MODE={mode}"
    base_url = os.environ.get("WANDB_BASE_URL", WANDB_URL)
    key = _api_key(base_url)
    if key is None and not os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        if mode != "online":
            return logging.INFO, "no WANDB_API_KEY and no `wandb login` credentials"
        return logging.WARNING, (
            "WANDB_MODE=online is set, but there is no WANDB_API_KEY and no `wandb login` "
            "credentials; run `wandb login` or set WANDB_API_KEY to upload"
        )
    if key is not None and (problem := api_key_problem(key[0])):
        return logging.WARNING, (
            f"{key[1]} is not a W&B API key ({problem}); fix it with `wandb login --relogin` "
            "or a correct WANDB_API_KEY"
        )
    if not reachable(base_url):
        return logging.WARNING, f"the W&B server {base_url} cannot be reached (no network?)"
    return None


def wandb_online() -> tuple[bool, str]:
    """Whether W&B can upload now, and if not, why (:func:`offline_reason`)."""
    offline = offline_reason()
    return offline is None, offline[1] if offline else ""
