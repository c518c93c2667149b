"""Errors a user can fix: reported as one clear message, never as a traceback."""


class IsotuneError(Exception):
    """Bad input or a missing resource; the message names the bad value and the fix."""


class NonFiniteLossError(IsotuneError):
    """The training loss became NaN or infinite: the run stops instead of training on garbage."""
