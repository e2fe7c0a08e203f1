"""Worker process of the second memory measure: the peak-RSS growth of one inference forward per chain
(:func:`alphafold_mem.memory.host.rss_growth`), in a fresh process started by :mod:`.inference` with
``MALLOC_MMAP_THRESHOLD_`` set low (:data:`alphafold_mem.memory.host.MMAP_ENV`) and torch's huge-page switch set
as the command line sets it (:func:`alphafold_mem.hugepages.request_huge_pages`, before any tensor).

``python -m alphafold_mem.ablation.rss_worker JOB.json`` where the job holds ``weights``, ``policy``
(every MemoryPolicy field), ``seed``, ``threads`` and ``chains`` (:class:`.chains.Chain` fields).
Features of every chain are built first; one forward on the first chain warms up (lazy
initialisation, allocator pools); then each chain's forward is measured once. Prints one JSON line
``{chain name: bytes}``.
"""

from __future__ import annotations

import json
import sys

import torch

from ..binding import bind
from ..hugepages import request_huge_pages
from ..memory import MemoryPolicy
from ..memory.host import rss_growth
from ..weights import load_weights
from .chains import Chain, chain_features
from .inference import forward


def main(argv: list[str]) -> int:
    request_huge_pages()
    job = json.loads(open(argv[0]).read())
    torch.set_num_threads(int(job["threads"]))
    policy = job["policy"]
    policy["attention_chunks"] = tuple(policy["attention_chunks"])
    model = load_weights(job["weights"]).model.eval()
    bind(model, MemoryPolicy(**policy))
    chains = [Chain(**{**c, "msa_files": tuple(c["msa_files"])}) for c in job["chains"]]
    batches = {c.name: chain_features(c, model.config, int(job["seed"])) for c in chains}
    cpu = torch.device("cpu")
    forward(model, batches[chains[0].name], cpu)  # warm-up
    result = {}
    for c in chains:
        with rss_growth() as grown:
            forward(model, batches[c.name], cpu)
        result[c.name] = grown.bytes
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
