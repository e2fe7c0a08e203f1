"""``memory-plan`` for a complex: ``--chains L1,L2,...`` (chain lengths, each chain its own entity) or
``--fasta FILE`` (every record of the file is one chain of one complex, AF2's convention; a record
whose chains are joined by ``:``, ColabFold's, gives one chain per part; identical sequences are one
entity, :mod:`alphafold_mem.data.complex`). The plan traces the AF2-Multimer model on the complex's
chain features (:class:`alphafold_mem.planner.Chains`) with the multimer's MSA sizes
(:func:`alphafold_mem.planner.multimer_sizes`); without ``--preset`` a complex is planned under
:data:`COMPLEX_PRESET`, and the output says so.

A complex that fits under no policy gets one more line (:func:`largest`; ``"largest"`` in ``--json``):
the largest complex like it that would fit, every chain cropped to one fraction of its length, or the
first chains whole, with the ``predict`` flags that run it (:mod:`alphafold_mem.planner.largest`).
"""

from __future__ import annotations

import argparse
from typing import Optional

#: The preset a complex is planned under when ``--preset`` is not given (AF2 v2.3's multimer model).
COMPLEX_PRESET = "model_1_multimer_v3"
#: The preset of a single chain when ``--preset`` is not given.
CHAIN_PRESET = "model_1"


def chain_lengths(text: str) -> tuple[int, ...]:
    """``--chains``: ``"400,400,313"`` -> ``(400, 400, 313)``.

    Raises:
        argparse.ArgumentTypeError: not a comma-separated list of positive integers.
    """
    try:
        lengths = tuple(int(x) for x in text.split(","))
    except ValueError:
        lengths = ()
    if not lengths or min(lengths) < 1:
        raise argparse.ArgumentTypeError(
            f"expected chain lengths as positive integers separated by commas (e.g. 400,400,313), got {text!r}"
        )
    return lengths


def add_options(p: argparse.ArgumentParser) -> None:
    """Add ``--chains`` and ``--fasta`` to the ``memory-plan`` parser."""
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--chains",
        type=chain_lengths,
        default=None,
        metavar="L1,L2,...",
        help=f"plan a complex of chains of these lengths (each chain its own entity; default preset {COMPLEX_PRESET})",
    )
    group.add_argument(
        "--fasta",
        default=None,
        metavar="FILE",
        help="plan the complex of a FASTA file: every record one chain, ':' also separating chains; identical "
        f"sequences are one entity (default preset {COMPLEX_PRESET})",
    )


def resolve(args: argparse.Namespace):
    """Read the complex of ``args`` (``None`` for a single chain), set ``args.preset`` when not given
    and ``args.n_res`` to the complex's residues. Returns ``(chains, lines)``: the
    :class:`~alphafold_mem.planner.Chains` and the lines ``memory-plan`` prints about them.

    Raises:
        ValueError: ``--n-res`` or ``--max-length`` with a complex, or a FASTA file it cannot use (one
            line naming the file and record: :class:`~alphafold_mem.data.errors.InputError`).
    """
    chains, lines = None, []
    if args.chains is None and args.fasta is None:
        args.preset = args.preset or CHAIN_PRESET
        return None, lines
    from ..planner import Chains  # heavy: the planner loads torch

    which = "--chains" if args.chains is not None else "--fasta"
    if args.n_res is not None:
        raise ValueError(f"--n-res and {which}: the complex gives N_res (the sum of its chain lengths)")
    if args.max_length:
        raise ValueError(f"--max-length is for one chain, not with {which}")
    if args.chains is not None:
        chains = Chains.from_lengths(args.chains)
        source = "--chains; every chain its own entity"
    else:
        # only --fasta reads a file: its parsers load on demand
        from ..data.complex import read_complexes

        complex_ = read_complexes(args.fasta, one_complex=True)[0]
        chains = Chains.of_complex(complex_)
        args.chain_ids = [c.chain_id for c in complex_.chains]
        source = f"{args.fasta}: {complex_.describe()}"
    if args.preset is None:
        args.preset = COMPLEX_PRESET
        lines.append(f"preset {COMPLEX_PRESET} (the multimer model, the default for a complex; --preset to change)")
    args.n_res = chains.n_res
    lines.insert(0, f"complex: {chains.describe()} ({source})")
    return chains, lines


def monomer_note(config, chains) -> Optional[str]:
    """The line saying a monomer preset plans the chains as one chain (``None`` for a multimer)."""
    if chains is None or config.multimer:
        return None
    return (
        f"note: {config.preset} is a monomer preset: the {len(chains.lengths)} chains are planned as one chain of "
        f"{chains.n_res} residues (a multimer preset, e.g. {COMPLEX_PRESET}, runs the complex's chain features)"
    )


def largest(args: argparse.Namespace, config, chains, conf: dict, budget: int, precision: str) -> tuple[str, dict]:
    """When nothing fits: ``(line, json entry)`` of the largest complex like ``chains`` that fits the
    usable ``budget`` in ``precision`` (the most frugal precision the run allows), with the sizes of
    ``conf`` and the flags to run it (``--preset``, and ``--dap`` when planned per device)."""
    from ..planner.largest import largest_complex  # heavy: the planner loads torch

    found = largest_complex(
        config,
        chains,
        (conf["n_seq"], conf["n_extra"], conf["n_templ"]),
        budget,
        precision,
        conf["device"],
        dap=args.dap,
        max_chunk_size=args.max_chunk_size,
    )
    extra = f" --preset {args.preset}" + (f" --dap {args.dap}" if args.dap > 1 else "")
    entry = found.as_dict()
    entry["flags"] = f"predict {entry['flags']}{extra}"
    return found.describe(getattr(args, "chain_ids", None), f"alphafold-mem {entry['flags']}"), entry


def as_json(chains) -> Optional[dict]:
    """The ``--json`` config's ``chains`` entry: ``{"lengths", "entity_ids"}`` (``None`` for one chain)."""
    return None if chains is None else {"lengths": list(chains.lengths), "entity_ids": list(chains.entity_ids)}


__all__ = [
    "CHAIN_PRESET",
    "COMPLEX_PRESET",
    "add_options",
    "as_json",
    "chain_lengths",
    "largest",
    "monomer_note",
    "resolve",
]
