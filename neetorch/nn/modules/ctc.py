"""``torch.nn.CTCLoss`` (the computation is :func:`neetorch.nn.ctc.ctc_loss`)."""
from __future__ import annotations

from ..ctc import ctc_loss
from .loss import _Loss

__all__ = ["CTCLoss"]


class CTCLoss(_Loss):
    """``torch.nn.CTCLoss(blank=0, reduction='mean', zero_infinity=False)``;
    ``forward(log_probs, targets, input_lengths, target_lengths)`` is ``F.ctc_loss``."""

    __constants__ = ["blank", "reduction"]

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__(reduction=reduction)
        self.blank = blank
        self.zero_infinity = zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
                        self.zero_infinity)
