"""A logging filter that masks: handler exceptions and validation errors reach the log masked.

The guard logs a tool's exception with its traceback (``tool refund_order raised``) and a result
model's validation error (pydantic prints the offending input). Either can hold what the arguments
or the backend held: a card number, an e-mail address, a key. ``MaskingFilter`` renders the
message, the exception and the stack with the deployment's ``Masker`` and puts the masked text in
their place, before any handler formats or ships the record. ``configure()`` installs it on the
``guard``, ``telemetry`` and ``callgate`` loggers (``mask_logs=False`` to leave logging alone).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable

from telemetry.masking import Masker

__all__ = ["LOGGERS", "MaskingFilter", "install", "uninstall"]

LOGGERS = ("guard", "telemetry", "callgate")
"""The loggers callgate's own code logs to (``guard`` is one logger; the others per module)."""


class MaskingFilter(logging.Filter):
    """Masks every record it sees, in place; never drops one."""

    def __init__(self, masker: Masker) -> None:
        super().__init__()
        self.masker = masker

    def filter(self, record: logging.LogRecord) -> bool:
        mask = self.masker.mask_text
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: keep what there is, masked
            message = f"{record.msg!r} % {record.args!r}"
        record.msg = mask(message)
        record.args = None
        if record.exc_info and record.exc_info[0] is not None:
            text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            record.exc_text = mask(text)
            record.exc_info = None  # the exception object holds the unmasked text
        elif record.exc_text:
            record.exc_text = mask(record.exc_text)
        if record.stack_info:
            record.stack_info = mask(record.stack_info)
        return True


def _targets(names: Iterable[str]) -> list[logging.Logger]:
    manager = logging.Logger.manager
    loggers = [logging.getLogger(name) for name in names]
    prefixes = tuple(f"{name}." for name in names)
    for name, logger in list(manager.loggerDict.items()):
        if name.startswith(prefixes) and isinstance(logger, logging.Logger):
            loggers.append(logger)
    return loggers


def install(masker: Masker, names: Iterable[str] = LOGGERS) -> MaskingFilter:
    """Put one ``MaskingFilter`` on each named logger and its existing children (replacing ours)."""
    names = tuple(names)
    uninstall(names)
    masking = MaskingFilter(masker)
    for logger in _targets(names):
        logger.addFilter(masking)
    return masking


def uninstall(names: Iterable[str] = LOGGERS, *, only: MaskingFilter | None = None) -> None:
    """Take callgate's masking filters (or just ``only``) off the named loggers and their children."""
    for logger in _targets(tuple(names)):
        for existing in [f for f in logger.filters if isinstance(f, MaskingFilter)]:
            if only is None or existing is only:
                logger.removeFilter(existing)
