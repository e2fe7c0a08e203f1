"""What kind of molecule a FASTA record holds: ``protein``, ``nucleic`` or ``other`` (ligand SMILES,
CCD codes, ...), decided *before* its letters are validated, so that a nucleic-acid record with
tokens such as ``(MOD)`` or digits is skipped as nucleic instead of rejected as a bad protein.

Rules, first match wins:

1. a header tag: ``mol:protein`` -> protein; ``mol:na`` / ``mol:dna`` / ``mol:rna`` -> nucleic
   (RCSB ``pdb_seqres.txt``); any other ``mol:<x>`` -> other; a ``|``-separated field of the first
   header token equal to ``protein``, ``dna``, ``rna``, ``smiles``, ``ccd`` or ``ligand`` (Boltz
   ``>A|protein|...``), case-insensitive;
2. content: at least 10 residues, all of ``ACGTUN`` (either case) -> nucleic;
3. otherwise protein (its letters are then validated as such).
"""

from __future__ import annotations

__all__ = ["PROTEIN", "NUCLEIC", "OTHER", "classify_record", "nucleic_hint"]

PROTEIN, NUCLEIC, OTHER = "protein", "nucleic", "other"

_MOL_TAGS = {"protein": PROTEIN, "na": NUCLEIC, "dna": NUCLEIC, "rna": NUCLEIC}
_FIELD_TAGS = {"protein": PROTEIN, "dna": NUCLEIC, "rna": NUCLEIC, "smiles": OTHER, "ccd": OTHER, "ligand": OTHER}
_NUCLEIC = frozenset("ACGTUN")


def classify_record(description: str, sequence: str) -> tuple[str, str]:
    """``(kind, why)`` for one FASTA record.

    Args:
        description: the header line without ``>``.
        sequence: the record's sequence as written (any case, possibly with invalid characters).

    Returns:
        ``kind`` is :data:`PROTEIN`, :data:`NUCLEIC` or :data:`OTHER`; ``why`` says what decided it
        (``"mol:na in the header"``, ``"only ACGTUN letters"``, ...), for messages.
    """
    tokens = description.split()
    for token in tokens:
        if token.lower().startswith("mol:"):
            tag = token[4:].lower()
            return _MOL_TAGS.get(tag, OTHER), f"'{token}' in the header"
    if tokens:
        for field in tokens[0].split("|")[1:]:
            kind = _FIELD_TAGS.get(field.lower())
            if kind is not None:
                return kind, f"'|{field}' in the header"
    upper = sequence.upper()
    if len(upper) >= 10 and set(upper) <= _NUCLEIC:
        return NUCLEIC, "only ACGTUN letters"
    return PROTEIN, "default"


def nucleic_hint(sequence: str) -> str:
    """A hint for a record rejected as a protein whose letters are mostly ``ACGTU`` (``""`` otherwise)."""
    letters = [c for c in sequence.upper() if c.isalpha()]
    if len(letters) >= 10 and sum(c in _NUCLEIC for c in letters) >= 0.75 * len(letters):
        return " (it looks like a nucleic acid: tag the header with mol:na to have it skipped)"
    return ""
