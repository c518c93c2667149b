"""train.py's command line checked before Hydra reads it, where Hydra would stop without a fix:
a list setting of this project's sweepers or launcher typed as a sweep. The settings that hold a
list are read from the plugins' own schemas, so a new one is checked as soon as it exists."""

from __future__ import annotations

import shlex
import types
import typing
from collections.abc import Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from isotune.errors import IsotuneError
from isotune.training.cli import stop

# Where list settings of the sweepers and the launcher are typed (:func:`list_settings`).
LIST_SETTING_GROUPS = ("hydra.sweeper.", "hydra.launcher.")


def check_command_line(arguments: Sequence[str]) -> None:
    """Stop with one message and exit status 1, before Hydra reads ``arguments`` (train.py's
    command line), where Hydra would stop without the fix (:func:`check_list_settings`)."""
    try:
        check_list_settings(arguments)
    except IsotuneError as error:
        stop(str(error))


def check_list_settings(arguments: Sequence[str]) -> None:
    """Refuse a list setting of the sweepers or the launcher typed as a sweep
    (``hydra.sweeper.arms=none,isobn``, ``hydra.sweeper.seeds=range(1,4)``): Hydra sweeps none
    of its own settings, and says only "Sweeping over Hydra's configuration is not supported".
    The message gives each as the list it meant, bracketed and quoted for the shell."""
    candidates = [a for a in arguments if a.lstrip("+~").startswith(LIST_SETTING_GROUPS)]
    if not candidates:  # the plugins' schemas are read only where one of theirs is typed
        return
    parser = OverridesParser.create()
    lists = list_settings()
    typed, fixes = [], []
    for argument in candidates:
        try:
            (override,) = parser.parse_overrides([argument])
            items = list(override.sweep_string_iterator())
        except HydraException:  # not a sweep (a list already), or one Hydra reports itself
            continue
        key = override.key_or_group
        if key in lists:
            prefix = argument[: argument.index(key)]  # + or ++, kept
            typed.append(argument)
            fixes.append(shlex.quote(f"{prefix}{key}=[{','.join(items)}]"))
    if fixes:
        raise IsotuneError(
            f"{', '.join(typed)}: a list setting typed without brackets is a sweep to Hydra, "
            "which sweeps none of its own settings (it would stop with \"Sweeping over Hydra's "
            'configuration is not supported"). Fix: type the list in brackets, quoted for the '
            f"shell: {' '.join(fixes)}."
        )


def list_settings() -> set[str]:
    """The settings of this project's sweepers and launcher that hold a list
    (``hydra.sweeper.arms``, ``hydra.sweeper.seeds``, ``hydra.launcher.gpus``, ...), read from
    their config dataclasses; a config node's Hydra ``defaults`` list is no setting."""
    from hydra_plugins.isotune_launcher.gpus_launcher import GpusLauncherConf
    from hydra_plugins.isotune_launcher.optuna_sweeper import OptunaSweeperConf
    from hydra_plugins.isotune_launcher.study_sweeper import StudySweeperConf
    from hydra_plugins.isotune_launcher.summarizing_sweeper import SummarizingSweeperConf

    schemas = {
        "hydra.sweeper": (SummarizingSweeperConf, OptunaSweeperConf, StudySweeperConf),
        "hydra.launcher": (GpusLauncherConf,),
    }
    return {
        f"{group}.{name}"
        for group, confs in schemas.items()
        for conf in confs
        for name, hint in typing.get_type_hints(conf).items()
        if name != "defaults" and _holds_a_list(hint)
    }


def _holds_a_list(hint: Any) -> bool:
    """``list[...]``, or a union with one (``list[str] | None``)."""
    if typing.get_origin(hint) is list:
        return True
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and any(
        _holds_a_list(arg) for arg in typing.get_args(hint)
    )
