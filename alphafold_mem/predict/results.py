"""What a prediction run returns: one :class:`TargetResult` per target and the :class:`PredictionRun`
with its exit status and end-of-run summary table (:func:`alphafold_mem.predict.predict`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

__all__ = ["PredictionRun", "TargetResult"]


@dataclass
class TargetResult:
    """The outcome for one target.

    ``status``: ``"ok"``, ``"skipped"`` (finished outputs exist), ``"invalid"`` (input rejected
    before model work) or ``"failed"`` (error during features, model or output writing).
    """

    name: str
    length: Optional[int] = None
    msa_depth: Optional[int] = None
    mean_plddt: Optional[float] = None
    ptm: Optional[float] = None
    recycles_run: Optional[int] = None  # recycles after the first iteration (fewer when stopped early)
    seconds: Optional[float] = None
    status: str = "ok"
    message: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    order: int = field(default=0, repr=False)  # position in the input, for the summary
    phase: str = field(default="", repr=False)  # "collectives" while the DAP ranks run the model together


@dataclass
class PredictionRun:
    """Results of :func:`predict`: one :class:`TargetResult` per target (and per rejected input)."""

    results: list[TargetResult]
    out_dir: str
    timings_path: Optional[str] = None
    weights: Optional[str] = None

    @property
    def failed(self) -> list[TargetResult]:
        return [r for r in self.results if r.status in ("invalid", "failed")]

    @property
    def exit_code(self) -> int:
        """0 if nothing failed, 1 otherwise."""
        return 1 if self.failed else 0

    def summary_table(self) -> str:
        """The end-of-run table: target, length, MSA depth, mean pLDDT, seconds, status."""
        rows = [("target", "length", "MSA depth", "mean pLDDT", "seconds", "status")]
        for r in self.results:
            rows.append(
                (r.name, _fmt(r.length), _fmt(r.msa_depth), _fmt(r.mean_plddt, ".1f"), _fmt(r.seconds, ".1f"), r.status)
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = []
        for k, row in enumerate(rows):
            cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:5], widths[1:5])] + [row[5]]
            lines.append("  ".join(cells).rstrip())
            if k == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)


def _fmt(value, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)
