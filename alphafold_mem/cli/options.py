"""The command line's one vocabulary: the options several subcommands share, spelled the same in each,
and the argparse types that check every number and size when the command line is read (a bad value
ends in one ``error:`` line and exit status 2, before anything is loaded).

Shared names:

* ``--max-memory SIZE``: the memory budget (``predict``, ``memory-plan``, ``train``); ``memory-plan
  --budget`` is its old spelling;
* ``--no-progress``: no progress bars or progress lines (``predict``, ``search``, ``memory-plan``,
  ``train``); ``memory-plan --quiet/-q`` and ``train --no-progress-bar`` are its old spellings;
* ``--precision fp32|bf16|bf16-full``: the :class:`~alphafold_mem.MemoryPolicy` precisions
  (``predict``, ``memory-plan``; ``train``: ``fp32`` or ``bf16``, Lightning's ``32`` and
  ``bf16-mixed`` being their old spellings).

An old spelling still works, hidden from ``--help``, and prints one ``note:`` line naming the new one.
This module imports nothing heavy: building the parser loads no torch, so ``--help``, ``--version`` and
a rejected option cost a fraction of a second.
"""

from __future__ import annotations

import argparse
import sys

from ..units import parse_size

#: The policy's precisions, in :data:`alphafold_mem.precision.Precision`'s order (held here so that the
#: parser needs no torch; tests/test_cli_startup.py checks that they agree).
PRECISIONS = ("fp32", "bf16", "bf16-full")

#: ``--malloc``: :data:`alphafold_mem.memory.host.MALLOC_SETTINGS` (checked by the same test).
MALLOC_SETTINGS = ("trim", "release", "default")

#: ``predict --weights``' default: :data:`alphafold_mem.weights.DEFAULT_WEIGHTS` (checked by the same test).
DEFAULT_WEIGHTS = "data/demo_weights/demo.ckpt"

#: ``train --precision``: ours -> Lightning's (what the trainer and checkpoints hold).
TRAIN_PRECISIONS = {"fp32": "32", "bf16": "bf16-mixed"}

__all__ = [
    "DEFAULT_WEIGHTS",
    "MALLOC_SETTINGS",
    "PRECISIONS",
    "TRAIN_PRECISIONS",
    "OldSpelling",
    "Parser",
    "add_max_memory",
    "add_no_progress",
    "memory_size",
    "non_negative_float",
    "non_negative_int",
    "note",
    "positive_float",
    "positive_int",
    "probability",
    "train_precision",
]


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: ``PROG: error: MESSAGE (PROG --help lists the
    options)``, exit status 2 (argparse prints the whole usage first, many lines for ``predict``)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")


def note(line: str) -> None:
    """One ``note:`` line on stderr."""
    print(f"note: {line}", file=sys.stderr, flush=True)


def _number(kind, test, what: str):
    def check(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value != value or not test(value):  # value != value: NaN
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    check.__name__ = what.replace(" ", "_")  # argparse names the type in some messages
    return check


#: ``type=`` functions: the value, or one line naming what was expected.
positive_int = _number(int, lambda v: v >= 1, "a positive integer")
non_negative_int = _number(int, lambda v: v >= 0, "an integer >= 0")
positive_float = _number(float, lambda v: 0 < v < float("inf"), "a positive number")
non_negative_float = _number(float, lambda v: 0 <= v < float("inf"), "a number >= 0")
probability = _number(float, lambda v: 0 <= v <= 1, "a probability between 0 and 1")


def memory_size(text: str) -> int:
    """``type=`` for memory sizes: bytes from ``40GiB``, ``512MiB``, ``80GB``
    (:func:`~alphafold_mem.units.parse_size`)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def train_precision(text: str) -> str:
    """``type=`` for ``train --precision``: ``fp32`` or ``bf16`` -> Lightning's ``32`` / ``bf16-mixed``
    (accepted too, with a note)."""
    if text in TRAIN_PRECISIONS:
        return TRAIN_PRECISIONS[text]
    old = {v: k for k, v in TRAIN_PRECISIONS.items()}
    if text in old:
        note(f"--precision {text} is spelled --precision {old[text]} (the name predict and memory-plan use)")
        return text
    raise argparse.ArgumentTypeError(f"expected one of {', '.join(TRAIN_PRECISIONS)}, got {text!r}")


class OldSpelling(argparse.Action):
    """A hidden old spelling of option ``new``: stores as ``new`` does (same ``dest``) and prints a note.
    ``const`` set: a flag storing ``const``; otherwise it takes one value."""

    def __init__(self, option_strings, dest, new: str, const=None, **kwargs):
        self.new = new
        nargs = 0 if const is not None else None
        super().__init__(option_strings, dest, nargs=nargs, const=const, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        note(f"{option_string} is now {self.new}")
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def add_max_memory(p, what: str, *, old: tuple[str, ...] = ()) -> None:
    """``--max-memory SIZE`` (dest ``max_memory``, bytes); ``what`` ends the help (the default);
    ``old``: hidden old spellings."""
    p.add_argument(
        "--max-memory",
        type=memory_size,
        default=None,
        metavar="SIZE",
        help=f"memory budget, e.g. 40GiB, 512MiB (GB and MB: powers of 10); {what}",
    )
    for flag in old:
        p.add_argument(flag, dest="max_memory", type=memory_size, action=OldSpelling, new="--max-memory")


def add_no_progress(p, what: str = "no progress bars or progress lines", *, old: tuple[str, ...] = ()) -> None:
    """``--no-progress`` (dest ``progress``, default True); ``old``: hidden old spellings."""
    p.add_argument("--no-progress", dest="progress", action="store_false", help=what)
    if old:
        p.add_argument(*old, dest="progress", action=OldSpelling, new="--no-progress", const=False)
