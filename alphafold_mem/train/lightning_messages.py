"""Lightning's messages that say nothing about a run of ``alphafold-mem train``, left out one by one by
their text and category (every other warning and log line still shows): a deprecation inside Lightning's
own code, a note on a hook this package overrides on purpose, a torch.load default applied to Lightning's
own checkpoints, and an advertisement for a hosted logger."""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from typing import Iterator

__all__ = ["LOG_LINES", "WARNINGS", "quiet_lightning"]

#: ``(category, message pattern)`` of the warnings left out.
WARNINGS = (
    # torch's deprecation of LeafSpec, hit by Lightning's own lightning/pytorch/utilities/_pytree.py
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
    # AlphaFoldLightning.transfer_batch_to_device is meant to be the one used (the data module has none)
    (UserWarning, r"You have overridden `transfer_batch_to_device` in `LightningModule` but have passed in a"),
)

#: ``(logger name, message pattern)`` of the log lines left out.
LOG_LINES = (
    ("lightning.pytorch.utilities.rank_zero", r"💡 Tip: For seamless cloud logging"),
    # the default of torch.load that Lightning applies to its own checkpoints
    ("lightning.pytorch.trainer.connectors.checkpoint_connector", r"`weights_only` was not set, defaulting to"),
)


class _Drop(logging.Filter):
    def __init__(self, pattern: str) -> None:
        super().__init__()
        self.pattern = re.compile(pattern)

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.match(record.getMessage())


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
    """Within the block, leave out :data:`WARNINGS` and :data:`LOG_LINES` (the filters are removed on exit)."""
    filters = [(logging.getLogger(name), _Drop(pattern)) for name, pattern in LOG_LINES]
    with warnings.catch_warnings():
        for category, pattern in WARNINGS:
            warnings.filterwarnings("ignore", message=pattern, category=category)
        for logger, drop in filters:
            logger.addFilter(drop)
        try:
            yield
        finally:
            for logger, drop in filters:
                logger.removeFilter(drop)
