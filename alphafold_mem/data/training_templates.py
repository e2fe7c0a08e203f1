"""Templates of a training chain (AF2 Suppl. 1.2.3; OpenFold's training data config), from the hit
files kept in the chain's alignment folder, through the prediction path's
:func:`~.templates_from_hits.templates_from_hit_file` (same checks, same mmCIF lookup).

* Hit file: the first of ``pdb70_hits.hhr``, ``hmm_output.sto``, ``pdb_hits.sto`` present in the
  folder (:data:`HIT_FILES`; AF2 v2.0 HHsearch, AF2 v2.3 hmmsearch, our search's name), or, for a
  chain whose alignments are in OpenFold's alignment database (:mod:`.alignment_db`), the first of
  them among its stored files, read by seek (:class:`HitFile`); the same hits either way.
* Date cut-off: the earlier of ``--max-template-date`` and the training chain's own release date
  minus 60 days (AF2 ``TemplateHitFeaturizer.get_templates``), so no template released after its
  target is used; a chain without a release date uses ``--max-template-date`` alone.
* Obsolete ids are followed to their successor (``obsolete.dat``).
* Training (OpenFold ``data.train``: ``shuffle_top_k_prefiltered`` 20, ``max_template_hits`` 4,
  ``subsample_templates``): the first 20 hits (in the file's rank order) are shuffled, hits are
  checked in that order until 4 pass, and then a uniformly drawn number ``k`` in ``0..n`` of the ``n``
  passing templates is kept, in random order (OpenFold ``data_transforms.random_crop_to_size``:
  ``templates_crop_start = randint(0, n)`` inclusive, ``n - start`` templates kept). So a chain with
  ``n`` usable templates trains without any in 1 draw of ``n + 1`` on average, as in OpenFold.
  Evaluation: the first 4 passing hits in rank order.

The template features are built on the full chain and cropped with the sample by
:func:`~.features.make_features`.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from .errors import InputError
from .template_hits import read_template_hits
from .templates_from_hits import TemplateSelection, select_templates

__all__ = [
    "HIT_FILES",
    "HitFile",
    "TemplateSource",
    "find_hit_file",
    "find_stored_hit_file",
    "template_cutoff",
    "subsample_templates",
    "training_templates",
]

#: Hit files looked for in a chain's alignment folder, in this order.
HIT_FILES = ("pdb70_hits.hhr", "hmm_output.sto", "pdb_hits.sto")
#: AF2: templates must be released at least this many days before the target.
RELEASE_DELTA_DAYS = 60
#: OpenFold ``data.train.shuffle_top_k_prefiltered``.
SHUFFLE_TOP_K = 20


@dataclass
class TemplateSource:
    """Where training templates come from.

    Attributes:
        mmcif_dirs: directories holding template mmCIFs (``--template-mmcif-dir``).
        max_template_date: ``YYYY-MM-DD`` (``--max-template-date``) or None.
        obsolete: obsolete id -> successor (:func:`~.templates_from_hits.parse_obsolete`).
        max_hits: templates featurised per chain (OpenFold ``max_template_hits``: 4).
        shuffle_top_k: hits shuffled before the checks in training (OpenFold: 20).
        subsample: draw the number of templates kept in training (OpenFold ``subsample_templates``).
    """

    mmcif_dirs: Sequence = ()
    max_template_date: Optional[str] = None
    obsolete: dict = field(default_factory=dict)
    max_hits: int = 4
    shuffle_top_k: int = SHUFFLE_TOP_K
    subsample: bool = True

    def __post_init__(self):
        self.mmcif_dirs = (
            [self.mmcif_dirs] if isinstance(self.mmcif_dirs, (str, os.PathLike)) else list(self.mmcif_dirs)
        )
        for d in self.mmcif_dirs:
            if not Path(d).is_dir():
                raise InputError("template mmCIF directory not found", file=d)
        template_cutoff(self.max_template_date, None)  # a bad date fails at start-up


@dataclass(frozen=True)
class HitFile:
    """A chain's template hit file: the file ``path``, or (``span`` given) the ``span = (start, size)``
    bytes of the alignment database shard ``path`` that hold the file ``name``."""

    path: Path
    name: str
    span: Optional[tuple[int, int]] = None

    def __str__(self) -> str:
        return str(self.path) if self.span is None else f"{self.path}[{self.name}]"

    def read(self, query_length: int) -> list:
        """The hits (:func:`~.template_hits.read_template_hits`), mapped onto ``query_length`` residues.

        Raises:
            InputError: the file or stored bytes cannot be read or parsed.
        """
        return read_template_hits(self.path, query_length, span=self.span, name=self.name)


def find_hit_file(folder: str | os.PathLike | None) -> Optional[Path]:
    """The chain's template hit file (:data:`HIT_FILES`, first found), or None."""
    if folder is None:
        return None
    for name in HIT_FILES:
        path = Path(folder) / name
        if path.is_file():
            return path
    return None


def find_stored_hit_file(db: str | os.PathLike, files) -> Optional[HitFile]:
    """The template hit file among a chain's files in an alignment database shard ``db`` (``files``:
    the index's ``[[name, start, size], ...]``; :data:`HIT_FILES` order, first found), or None."""
    where = {f[0]: (int(f[1]), int(f[2])) for f in files}
    name = next((n for n in HIT_FILES if n in where), None)
    return None if name is None else HitFile(Path(db), name, where[name])


def _hit_file(where) -> Optional[HitFile]:
    if where is None or isinstance(where, HitFile):
        return where
    path = find_hit_file(where)
    return None if path is None else HitFile(path, path.name)


def _date(text: Optional[str]) -> Optional[_dt.date]:
    try:
        return _dt.date.fromisoformat(str(text)[:10]) if text else None
    except ValueError:
        return None


def template_cutoff(max_template_date: Optional[str], release_date: Optional[str]) -> Optional[str]:
    """``YYYY-MM-DD``: the earlier of ``max_template_date`` and ``release_date`` - 60 days (None when
    neither is known).

    Raises:
        InputError: ``max_template_date`` is not a date.
    """
    cutoff = _date(max_template_date)
    if max_template_date and cutoff is None:
        raise InputError(f"--max-template-date {max_template_date!r}: expected YYYY-MM-DD")
    released = _date(release_date)
    if released is not None:
        limit = released - _dt.timedelta(days=RELEASE_DELTA_DAYS)
        cutoff = limit if cutoff is None else min(cutoff, limit)
    return None if cutoff is None else cutoff.isoformat()


def subsample_templates(templates: list, rng: np.random.Generator) -> list:
    """OpenFold ``data_transforms.random_crop_to_size`` with ``subsample_templates``: a uniformly
    drawn start ``s`` in ``0..n`` (both ends included), a random order, and the first ``n - s``
    templates of that order. ``s = n`` keeps none: probability ``1 / (n + 1)``, as in OpenFold."""
    n = len(templates)
    start = int(rng.integers(0, n + 1))
    order = rng.permutation(n)
    return [templates[i] for i in order[: n - start]]


def training_templates(
    sequence: str,
    where: HitFile | str | os.PathLike | None,
    release_date: Optional[str],
    source: TemplateSource,
    *,
    train: bool,
    rng: np.random.Generator,
    structure_cache: Optional[dict] = None,
    log: Optional[Callable[[str], None]] = None,
) -> tuple[list, Optional[TemplateSelection]]:
    """``(templates, selection)`` for one chain: ``(chain, mapping)`` pairs ready for
    :func:`~.features.make_features` and the per-hit choices (None without a hit file).

    ``where`` is the chain's alignment folder (its hit file found by :func:`find_hit_file`), a
    :class:`HitFile` (e.g. from :func:`find_stored_hit_file`), or None (no templates). An unreadable
    hit file gives no templates (the prediction path's rule); ``log`` receives its warning line and
    the dropped hits.
    """
    hit_file = _hit_file(where)
    if hit_file is None:
        return [], None
    log = log or (lambda line: None)
    try:
        hits = hit_file.read(len(sequence))
    except (InputError, OSError) as exc:
        log(f"warning: {' '.join(str(exc).split())}; training this chain without templates")
        return [], None
    hits = list(hits)
    if train and source.shuffle_top_k:
        k = min(source.shuffle_top_k, len(hits))
        hits[:k] = [hits[i] for i in rng.permutation(k)]
    selection = select_templates(
        sequence,
        hits,
        source.mmcif_dirs,
        max_templates=source.max_hits,
        max_template_date=template_cutoff(source.max_template_date, release_date),
        obsolete=source.obsolete,
        log=log,
        structure_cache=structure_cache,
    )
    chosen = list(selection.templates)
    if train and source.subsample:
        chosen = subsample_templates(chosen, rng)
    return chosen, selection
