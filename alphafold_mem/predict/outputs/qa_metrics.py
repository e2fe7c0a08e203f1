"""What the ModelCIF writers of a chain (:mod:`.modelcif`) and of a complex (:mod:`.complex_files`)
share: :func:`ascii_text` for mmCIF's ASCII and :func:`qa_metric`, which declares a QA-metric class.

``modelcif`` writes a metric class's name and the first line of its docstring as ``_ma_qa_metric``'s
``name`` and ``description``: each writer declares its own global metrics, whose descriptions say what
they are taken over ("over the chain", "over the complex").
"""

from __future__ import annotations

import modelcif.qa_metric

__all__ = ["ascii_text", "qa_metric", "LocalPLDDT"]

_MODES = {"local": modelcif.qa_metric.Local, "global": modelcif.qa_metric.Global}
_TYPES = {"pLDDT": modelcif.qa_metric.PLDDT, "pTM": modelcif.qa_metric.PTM, "ipTM": modelcif.qa_metric.IpTM}


def ascii_text(text) -> str:
    """mmCIF 1.1 is ASCII: white space folded to single spaces, anything else (e.g. from a FASTA header)
    replaced with '?'."""
    return " ".join(str(text).split()).encode("ascii", "replace").decode("ascii")


def qa_metric(mode: str, name: str, description: str) -> type:
    """A ``modelcif.qa_metric`` class without software.

    Args:
        mode: ``"local"`` (a value per residue) or ``"global"`` (one per model).
        name: ``"pLDDT"``, ``"pTM"`` or ``"ipTM"``: the metric's name, which also picks its type.
        description: one line, written as the metric's description (the class's docstring).
    """
    bases = (_MODES[mode], _TYPES[name])
    return type(f"_{mode.title()}{name}", bases, {"__doc__": description, "name": name, "software": None})


#: pLDDT per residue, the local metric of both writers.
LocalPLDDT = qa_metric("local", "pLDDT", "Predicted lDDT-CA per residue (0-100).")
