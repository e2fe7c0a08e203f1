"""State-dict key handling shared by every weights format.

* :func:`normalize_state_dict_keys`: strip the wrapper prefixes (:data:`WRAPPER_PREFIXES`) that
  DDP, Lightning and ``torch.compile`` add to parameter names;
* :func:`key_mismatch`: the one sentence (``missing N ..., first: ...; unexpected M ..., first: ...``)
  that strict loaders put in their error when a file's names differ from the model's;
* :class:`ParameterLoadError`: the error the format loaders raise when a file does not fit the model.
"""

from __future__ import annotations

from typing import Callable, Collection, Mapping, Sequence

import torch

__all__ = ["ParameterLoadError", "WRAPPER_PREFIXES", "key_mismatch", "normalize_state_dict_keys"]

WRAPPER_PREFIXES = ("module.", "model.", "_orig_mod.")


class ParameterLoadError(ValueError):
    """A parameter file does not fit the model: names the key and both shapes."""


def normalize_state_dict_keys(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Strip wrapper prefixes (``module.`` from DDP, ``model.`` from Lightning, ``_orig_mod.`` from
    torch.compile), repeatedly, from every key."""
    out = {}
    for k, v in sd.items():
        changed = True
        while changed:
            changed = False
            for p in WRAPPER_PREFIXES:
                if k.startswith(p):
                    k, changed = k[len(p) :], True
        out[k] = v
    return out


def key_mismatch(
    expected: Mapping[str, Sequence[int]], given: Collection[str], noun: str = "key", show: Callable[[str], str] = str
) -> str:
    """How the names ``given`` by a file differ from those a model ``expected``, as one sentence, or
    ``""`` when they are the same set.

    Args:
        expected: the model's names, each with its shape, in the order to report them.
        given: the file's names, in the order to report them.
        noun: what a name is called in the sentence (``"key"``, ``"parameter"``).
        show: how a name is printed (e.g. with the file's prefix put back).

    Returns:
        ``missing N <noun>(s), first: '<name>' (model expects shape <shape>); unexpected M <noun>(s),
        first: '<name>'`` (either part only when it applies), "first" in the orders given.
    """
    given_set = set(given)
    missing = [k for k in expected if k not in given_set]
    unexpected = [k for k in given if k not in expected]
    parts = []
    if missing:
        parts.append(
            f"missing {len(missing)} {noun}(s), first: '{show(missing[0])}' "
            f"(model expects shape {tuple(expected[missing[0]])})"
        )
    if unexpected:
        parts.append(f"unexpected {len(unexpected)} {noun}(s), first: '{show(unexpected[0])}'")
    return "; ".join(parts)
