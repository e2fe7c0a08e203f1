"""The planner under dynamic axial parallelism (DAP): per-device peaks and communication volumes.

* the estimator's fake run (:mod:`.estimate`) is one device (rank 0) of a simulated group of P
  (:func:`alphafold_mem.distributed.comm.simulated_group`, bound by :func:`alphafold_mem.bind`):
  every collective allocates its buffers exactly as on a real group and communicates nothing, so
  the predicted peak is the per-device peak, communication buffers included.
* :func:`block_comm_bytes` -- the bytes one device receives in the forward of one Evoformer-type
  block, derived by hand from the layouts (:mod:`alphafold_mem.distributed.runner`), independent
  of the counter in :mod:`alphafold_mem.distributed.comm` that ``scripts/bench_dap.py`` compares
  it with.
"""

from __future__ import annotations

import math

from ..config import ModelConfig
from ..distributed.product import PRODUCT_BLOCKS


def product_comm_elements(n_res: int, c_hidden: int, dap: int, outgoing: bool, rank: int = 0) -> int:
    """Elements device ``rank`` receives in one triangle multiplication in inference (per batch
    entry; :mod:`alphafold_mem.distributed.product`), L = ceil(N_res / P), R = ceil(L / 4):

    * outgoing: every other device's rows of the right projection, broadcast in blocks of R rows
      ``[C, R, N_res]`` (a block holding only padding rows is not sent): about ``(P - 1) L N_res C``;
    * incoming: the reduce-scatter of the partial sums, ``(P - 1) L N_res C`` exactly.
    """
    p, n = dap, n_res
    el = math.ceil(n / p)
    if not outgoing:
        return (p - 1) * el * n * c_hidden
    rows = max(1, math.ceil(el / PRODUCT_BLOCKS))
    sent = sum(min(rows, el - s0) for q in range(p) if q != rank for s0 in range(0, el, rows) if q * el + s0 < n)
    return sent * n * c_hidden


def block_comm_terms(
    config: ModelConfig, stack: str, n_res: int, n_rows: int, dap: int, inference: bool = False
) -> dict[str, int]:
    """Elements one device receives in the forward of one block of ``stack`` (``"evoformer"`` or
    ``"extra_msa"``; ``n_rows``: the MSA rows of that stack, N_seq plus template rows or N_extra),
    by operation. ``P - 1`` of the P pieces of every exchanged tensor arrive from other devices;
    L = ceil(N_res / P) and Lr = ceil(n_rows / P) are the padded local lengths.

    * MSA row attention: m to rows and back (two all-to-alls of ``[Lr, L, c_m]`` pieces), and the
      pair bias ``[L, N_res, H]`` of every other device (piecewise gather);
    * outer product mean: the right projection ``[n_rows, L, c]`` of every other device;
    * outgoing triangle multiplication: the right projection ``[L, N_res, c]`` of every other device;
    * incoming: the right projection to columns (an all-to-all of ``[L, L, c]`` pieces), and the
      other devices' rows of every column block of the left one (``[L, P L, c]`` in all: the blocks
      include the padding);
    * starting-node attention: the bias ``[L, N_res, H]`` of every other device; ending node: z to
      rows and the result back (``[L, L, c_z]`` pieces), and the bias (distributed by columns)
      ``[N_res, L, H]`` of every other device.

    ``inference=True`` (no autograd): the triangle multiplications take the block-wise path
    (:func:`product_comm_elements`, for rank 0).
    """
    cfg = config.evoformer if stack == "evoformer" else config.extra_msa
    c_m = config.c_m if stack == "evoformer" else config.c_e
    p, n = dap, n_res
    q = p - 1
    el, lr = math.ceil(n / p), math.ceil(n_rows / p)
    hm, hp, cz = cfg.num_heads_msa, cfg.num_heads_pair, config.c_z
    terms = {
        "msa_row_attention": q * (2 * lr * el * c_m + el * n * hm),
        "outer_product_mean": q * n_rows * el * cfg.c_hidden_opm,
        "triangle_multiplication_outgoing": q * el * n * cfg.c_hidden_mul,
        "triangle_multiplication_incoming": q * (el * el * cfg.c_hidden_mul + p * el * el * cfg.c_hidden_mul),
        "triangle_attention_starting_node": q * el * n * hp,
        "triangle_attention_ending_node": q * (2 * el * el * cz + el * n * hp),
    }
    if inference:
        for name, outgoing in (("triangle_multiplication_outgoing", True), ("triangle_multiplication_incoming", False)):
            terms[name] = product_comm_elements(n, cfg.c_hidden_mul, p, outgoing)
    return terms


def block_comm_bytes(
    config: ModelConfig, stack: str, n_res: int, n_rows: int, dap: int, itemsize: int = 4, inference: bool = False
) -> int:
    """Bytes one device receives in the forward of one block (see :func:`block_comm_terms`)."""
    return itemsize * sum(block_comm_terms(config, stack, n_res, n_rows, dap, inference).values())


__all__ = ["block_comm_bytes", "block_comm_terms", "product_comm_elements"]
