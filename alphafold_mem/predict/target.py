"""The prediction target record: one validated input with its MSA files (:class:`Target`), a rejected
input (:class:`Rejected`), and the header fields of the scores JSON (:func:`description_fields`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

__all__ = ["DESCRIPTION_CHARS", "DESCRIPTION_FULL_CHARS", "Rejected", "Target", "description_fields"]

#: Characters of a header kept in the scores JSON's ``description`` (:func:`description_fields`).
DESCRIPTION_CHARS = 200
#: Characters of a longer header kept in ``description_full``.
DESCRIPTION_FULL_CHARS = 10_000


@dataclass
class Target:
    """One prediction target after validation.

    Attributes:
        name: sanitised record id, unique in the run (names the output files).
        sequence: one-letter query sequence (``N_res``).
        description: the FASTA header (or the alignment's first description).
        source: ``path:line`` of the record (or the alignment path).
        msa_files: alignment files for this target (merged in order); empty = single-sequence.
        from_alignment: the input itself was an ``.a3m``/``.sto`` (its first row is the query).
        msa_depth: distinct rows of the merged MSA, query included (1 without MSA).
        neff: Neff at 80 % identity of those rows (:class:`alphafold_mem.data.neff.NeffResult`).
        order: position among the run's inputs (for the summary table).
        provenance: what produced (will produce) the outputs (:mod:`.provenance`), set by the run.
        record_paths: write local paths (inputs, weights) into the output files.
        input_id: the record id as the input gives it (first header token, ``<file stem>_<chain>``),
            before :func:`alphafold_mem.data.names.sanitize_name` made ``name`` from it.
    """

    name: str
    sequence: str
    description: str
    source: str
    msa_files: tuple[str, ...] = ()
    msas: list = field(default_factory=list, repr=False)  # parsed Msa records, only during validation
    from_alignment: bool = False  # the input itself was an .a3m/.sto
    msa_depth: int = 1
    order: int = 0
    neff: Optional[object] = None
    provenance: dict = field(default_factory=dict, repr=False)
    record_paths: bool = False
    measured_files: tuple = field(default=(), repr=False)
    input_id: Optional[str] = field(default=None, repr=False)

    def description_fields(self) -> dict:
        """The description's fields of the scores JSON (:func:`description_fields`)."""
        return description_fields(self.description)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]} [... {len(text) - limit} more characters]"


def description_fields(description: str) -> dict:
    """A header for the scores JSON, capped: ``{"description": ...}`` with at most
    :data:`DESCRIPTION_CHARS` (200) characters; a longer header is cut there with the marker
    ``" [... N more characters]"`` and comes whole in ``"description_full"`` up to
    :data:`DESCRIPTION_FULL_CHARS` (10,000) characters (cut with the same marker past that), with its
    length in ``"description_length"`` (characters)."""
    if len(description) <= DESCRIPTION_CHARS:
        return {"description": description}
    return {
        "description": _cut(description, DESCRIPTION_CHARS),
        "description_full": _cut(description, DESCRIPTION_FULL_CHARS),
        "description_length": len(description),
    }


@dataclass(frozen=True)
class Rejected:
    """An input rejected before model work: ``message`` is one line naming file, record and position."""

    name: str
    message: str
    order: int
    length: Optional[int] = None
