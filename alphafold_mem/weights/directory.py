"""A folder of published weights: which file holds ``model_<k>`` of a family.

Recognised file names (the names the publishers use):

* AF2 (``params_model_{1..5}.npz``, family ``af2``; ``params_model_{1..5}_ptm.npz``, family ``af2_ptm``;
  AF2-Multimer v3's ``params_model_{1..5}_multimer_v3.npz``, family ``af2_multimer``), from DeepMind's
  parameter archive;
* OpenFold (``finetuning_{1..5}.pt``, family ``openfold``; ``finetuning_ptm_{k}.pt`` or any ``*_{k}_ptm.pt``,
  family ``openfold_ptm``), from OpenFold's published checkpoints.

They are looked for in the folder and two levels of sub-folders (``weights fetch`` unpacks a release
into ``DIR/<name>/``, and an archive may hold its own folder).

Files of one family are taken together: an ensemble never mixes AF2 and OpenFold weights, nor
pTM and plain models, nor monomer and multimer models. Multimer files are taken when a multimer
preset is asked for, or when the folder holds them and no monomer file of the same model numbers; a
folder with both kinds of a model asked for is an error unless the caller says which. The model name
recorded in the outputs is AF2's (``model_1``, ``model_1_ptm``, ``model_1_multimer_v3``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

from .detect import WeightsError

__all__ = ["FAMILIES", "ModelWeights", "find_model_weights", "model_name_of", "parse_model_list"]

#: Families in the order they are preferred when a folder holds several: the pTM variants first
#: (they add the PAE head and pTM), AF2's before OpenFold's; AF2-Multimer's only for a multimer run.
FAMILIES = ("af2_ptm", "af2", "openfold_ptm", "openfold", "af2_multimer")
MULTIMER_FAMILIES = ("af2_multimer",)
_SUFFIX = {"af2_ptm": "_ptm", "openfold_ptm": "_ptm", "af2_multimer": "_multimer_v3"}

_PATTERNS = {
    "af2_ptm": re.compile(r"^params_model_([1-5])_ptm\.npz$"),
    "af2_multimer": re.compile(r"^params_model_([1-5])_multimer_v3\.npz$"),
    "af2": re.compile(r"^params_model_([1-5])\.npz$"),
    "openfold_ptm": re.compile(r"^(?:finetuning_ptm_([1-5])|[A-Za-z0-9_]*?_([1-5])_ptm)\.pt$"),
    "openfold": re.compile(r"^finetuning_([1-5])\.pt$"),
}


@dataclass(frozen=True)
class ModelWeights:
    """One model of an ensemble: its AF2 name (``model_1_ptm``), number (1-5), family and file."""

    name: str
    number: int
    family: str
    path: str


def parse_model_list(text: str) -> list[int]:
    """``"1,2,3"`` (or ``"1-5"``, ``"all"``) -> ``[1, 2, 3]``: AF2 model numbers 1-5, each once, in order given.

    Raises:
        ValueError: anything but numbers 1-5 (the message says what is valid).
    """
    text = text.strip().lower()
    if text == "all":
        return [1, 2, 3, 4, 5]
    numbers: list[int] = []
    for part in text.split(","):
        part = part.strip().removeprefix("model_")
        m = re.fullmatch(r"([1-5])(?:-([1-5]))?", part)
        if not m:
            raise ValueError(
                f"--models {text!r}: give AF2 model numbers 1-5 separated by commas (e.g. 1,2,3), or 'all'"
            )
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        numbers += [k for k in range(lo, hi + 1) if k not in numbers]
    return numbers


def _found(directory: str, depth: int = 2) -> dict[str, dict[int, str]]:
    """Recognised files in ``directory`` and its sub-folders down to ``depth`` levels (an unpacked
    archive may hold its own folder), the shallowest first."""
    found: dict[str, dict[int, str]] = {f: {} for f in FAMILIES}
    level = [directory]
    for _ in range(depth + 1):
        below = []
        for folder in level:
            for entry in sorted(os.listdir(folder)):
                path = os.path.join(folder, entry)
                if os.path.isdir(path):
                    below.append(path)
                    continue
                for family, pattern in _PATTERNS.items():
                    m = pattern.match(entry)
                    if m:
                        found[family].setdefault(int(next(g for g in m.groups() if g)), path)
                        break
        level = below
    return found


def find_model_weights(
    directory, numbers: list[int], need_ptm: bool = False, multimer: Optional[bool] = None
) -> list[ModelWeights]:
    """The weights files of AF2 models ``numbers`` in ``directory``, all from the first family of
    :data:`FAMILIES` that has every one of them (``need_ptm``: a family with the PAE head: pTM or
    multimer).

    Args:
        multimer: True: AF2-Multimer files only (a multimer preset was asked for); False: monomer
            files only; None: multimer files when the folder holds some of ``numbers`` and no monomer
            file of the same numbers.

    Raises:
        WeightsError: no such folder, both kinds of a model asked for with ``multimer=None``, or no
            family has all the models (one line naming what was found).
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise WeightsError(directory, "--weights-dir: no such directory")
    found = _found(directory)
    if multimer is None:
        multi = {k for f in MULTIMER_FAMILIES for k in found[f] if k in numbers}
        mono = {k for f in FAMILIES if f not in MULTIMER_FAMILIES for k in found[f] if k in numbers}
        if multi & mono:
            k = min(multi & mono)
            example = os.path.basename(found["af2_multimer"][k])
            raise WeightsError(
                directory,
                f"holds both monomer and AF2-Multimer weights of model {k} (e.g. {example}); "
                "say which with a multimer or monomer --preset, or keep them in separate folders",
            )
        multimer = bool(multi)
    for family in FAMILIES:
        if need_ptm and family not in _SUFFIX:
            continue
        if (family in MULTIMER_FAMILIES) != multimer:
            continue
        files = found[family]
        if all(k in files for k in numbers):
            suffix = _SUFFIX.get(family, "")
            return [ModelWeights(f"model_{k}{suffix}", k, family, files[k]) for k in numbers]
    have = "; ".join(f"{f}: models {','.join(map(str, sorted(v)))}" for f, v in found.items() if v) or "none"
    wanted = ",".join(map(str, numbers))
    raise WeightsError(
        directory,
        f"no weights family with every model of --models {wanted}"
        + (" with a pTM head (--rank-by ptm)" if need_ptm else "")
        + (" of AF2-Multimer" if multimer else "")
        + f" (found {have}); expected AF2's params_model_<k>[_ptm|_multimer_v3].npz or OpenFold's "
        "finetuning_[ptm_]<k>.pt "
        "(alphafold-mem weights fetch downloads them)",
    )


def model_name_of(path, fallback: Optional[str] = None) -> str:
    """The AF2 model name a weights file name carries (``params_model_3_ptm.npz`` -> ``model_3_ptm``),
    else ``fallback`` or the file's stem (letters, digits, ``_``, ``-`` and ``.`` kept)."""
    base = os.path.basename(os.fspath(path))
    for family, pattern in _PATTERNS.items():
        m = pattern.match(base)
        if m:
            number = next(g for g in m.groups() if g)
            return f"model_{number}" + _SUFFIX.get(family, "")
    if fallback:
        return fallback
    stem = base.split(".")[0] or "model"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem)
