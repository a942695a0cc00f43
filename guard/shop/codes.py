"""The shop's own reason codes, declared through the public API like any deployment's."""

from __future__ import annotations

from guard.codes import DomainCode

__all__ = ["AMOUNT_EXCEEDS_REFUNDABLE", "CURRENCY_MISMATCH", "SHOP_CODES"]

CURRENCY_MISMATCH = DomainCode(
    "CURRENCY_MISMATCH",
    stage="rules",
    fixable=True,
    phrase="The currency differs from the record's.",
    advice="Resend with the record's currency and the amount in its minor units.",
)
AMOUNT_EXCEEDS_REFUNDABLE = DomainCode(
    "AMOUNT_EXCEEDS_REFUNDABLE",
    stage="rules",
    fixable=True,
    phrase="The amount is more than what is still refundable.",
    advice="Resend with at most the refundable amount, if the user wants.",
)
SHOP_CODES = (CURRENCY_MISMATCH, AMOUNT_EXCEEDS_REFUNDABLE)
"""Every code the shop's checks and backend add to the core set."""
