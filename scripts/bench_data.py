"""Training data path throughput on a synthetic OpenFold-layout tree (issue 33 item 5).

Builds a tree of ``--chains`` chains from the shipped files (data/mmcif entries copied under new
PDB ids, their alignment folders copied under the new chain names, a ``duplicate_pdb_chains.txt``
for the second chain of each 2Q2K copy and an alignment database made by ``alphafold-mem
alignment-db``), then prints one table:

* index build (``build_chain_index``, from scratch) per worker count: median wall time of
  ``--repeats`` runs (interleaved: repeat 1 of every worker count, then repeat 2, ...), CPU time
  (this process + workers), and the ratio to one worker, with every run listed;
* an incremental rebuild after adding 1 % more structures;
* start-up from a built index of ``--startup-chains`` chains (index entries replicated under new
  names): CPU seconds of ``ChainIndex.load`` + ``ProteinChainDataset``, in a fresh process;
* samples/s of ``ProteinChainDataset`` (preset ``--preset``, training mode) with alignments read
  from folders and from the alignment database.

Usage::

    python scripts/bench_data.py --chains 2000
    python scripts/bench_data.py --chains 200 --repeats 1 --startup-chains 2000   # quick look

The machine's load changes wall times: the table gives CPU times beside them, and the critical-path CPU
time of a build (this process's CPU plus the busiest worker's: the wall time on otherwise idle cores)
with its ratio to one worker.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from alphafold_mem.data.alignment_db import write_alignment_db  # noqa: E402
from alphafold_mem.data.chain_index import build_chain_index  # noqa: E402

DATA = ROOT / "data"
#: shipped entry -> (protein chains, alignment folder of chain A or None)
SOURCES = {"102m": ("A",), "1a8o": ("A",), "1lcd": ("A",), "2q2k": ("A", "B")}
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def _new_id(i: int) -> str:
    return "9" + "".join(_ALPHABET[(i // 36**k) % 36] for k in (2, 1, 0))


def make_tree(root: Path, chains: int, start: int = 0) -> tuple[int, int]:
    """Write structures (and their alignment folders) until ``chains`` chains exist; returns
    ``(structures, chains)`` written. Ids are numbered from ``start``."""
    texts = {s: (DATA / "mmcif" / f"{s}.cif").read_text() for s in SOURCES}
    (root / "pdb_mmcif").mkdir(parents=True, exist_ok=True)
    (root / "alignments").mkdir(exist_ok=True)
    dups, n, i = [], 0, start
    names = list(SOURCES)
    while n < chains:
        src = names[i % len(names)]
        new = _new_id(i)
        text = re.sub(src, new, texts[src], flags=re.IGNORECASE)
        (root / "pdb_mmcif" / f"{new}.cif").write_text(text)
        folder = DATA / "alignments" / f"{src}_A"
        if folder.is_dir():
            shutil.copytree(folder, root / "alignments" / f"{new}_A", dirs_exist_ok=True)
        if len(SOURCES[src]) > 1:
            dups.append(" ".join(f"{new}_{c}" for c in SOURCES[src]))
        n += len(SOURCES[src])
        i += 1
    with open(root / "duplicate_pdb_chains.txt", "a") as fh:
        fh.writelines(line + "\n" for line in dups)
    return i - start, n


def _cpu(who=resource.RUSAGE_SELF) -> float:
    u = resource.getrusage(who)
    return u.ru_utime + u.ru_stime


def build(tree: Path, out: Path, workers: int, via_db: bool = False):
    """``(index, wall s, CPU s of all processes, critical-path CPU s)``: the last is this process's CPU
    plus the busiest worker's (what the wall time would be on otherwise idle cores)."""
    t0, c0, k0 = time.perf_counter(), _cpu(), _cpu(resource.RUSAGE_CHILDREN)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        index = build_chain_index(
            [tree / "pdb_mmcif"],
            None if via_db else tree / "alignments",
            out / "index.json",
            cache_dir=out / "cache",
            workers=workers,
            alignment_index=tree / "alignment_db" / "alignment_db.index" if via_db else None,
            duplicate_chains=tree / "duplicate_pdb_chains.txt",
        )
    wall, main_cpu, kids = time.perf_counter() - t0, _cpu() - c0, _cpu(resource.RUSAGE_CHILDREN) - k0
    critical = main_cpu + (max(index.worker_cpu.values(), default=0.0) if workers > 1 else 0.0)
    index.main_cpu = main_cpu  # type: ignore[attr-defined]  # the serial part: this process's CPU s
    return index, wall, main_cpu + kids, critical


_STARTUP = """
import sys, time, warnings
t0 = time.process_time()
from alphafold_mem.config import model_config
from alphafold_mem.data import ChainIndex, ProteinChainDataset
t1 = time.process_time()
warnings.simplefilter("ignore")
ds = ProteinChainDataset(ChainIndex.load(sys.argv[1]), model_config("demo"))
t2 = time.process_time()
print(len(ds), t1 - t0, t2 - t1)
"""


def startup(index_path: Path, n: int, out: Path) -> tuple[int, float, float]:
    """Replicate the index's entries to ``n`` chains; CPU s of load + dataset in a fresh process."""
    data = json.loads(index_path.read_text())
    base = data["chains"]
    chains = []
    for k in range(n):
        e = dict(base[k % len(base)])
        e["name"] = f"{e['name']}_{k}"
        chains.append(e)
    data["chains"] = chains
    path = index_path.parent / f"index_{n}.json"
    path.write_text(json.dumps(data))
    res = subprocess.run(
        [sys.executable, "-c", _STARTUP, str(path)], capture_output=True, text=True, check=True, cwd=ROOT
    )
    count, imports, load = res.stdout.split()
    return int(count), float(imports), float(load)


def samples_per_s(index_path: Path, preset: str, draws: int) -> float:
    from alphafold_mem.config import model_config
    from alphafold_mem.data import ChainIndex, ProteinChainDataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = ProteinChainDataset(ChainIndex.load(index_path), model_config(preset), mode="train", seed=0)
        ds[0]  # warm-up (first-call imports and caches), not timed
        t0 = time.perf_counter()
        for k in range(draws):
            ds.set_epoch(k)
            ds[(k * 7919) % len(ds)]
    return draws / (time.perf_counter() - t0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chains", type=int, default=2000)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--startup-chains", type=int, default=20000)
    p.add_argument("--preset", default="demo")
    p.add_argument("--draws", type=int, default=20)
    p.add_argument("--keep", metavar="DIR", help="build the tree here and keep it (default: a temporary folder)")
    args = p.parse_args(argv)
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_data_"))
    tree = tmp / "tree"
    try:
        n_struct, n_chains = make_tree(tree, args.chains)
        write_alignment_db(tree / "alignments", tree / "alignment_db", shards=4)
        print(
            f"tree: {n_struct} structures, {n_chains} chains, {len(os.listdir(tree / 'alignments'))} alignment folders"
        )
        print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        head = f"{'measure':<52} {'wall s':>9} {'CPU s':>9} {'ratio':>7} {'crit. CPU s':>12} {'ratio':>7}"
        print(head)
        runs: dict[int, list] = {w: [] for w in args.workers}
        last = None
        for r in range(args.repeats):  # interleaved: the machine's load changes alike for every worker count
            for w in args.workers:
                out = tmp / f"index_w{w}_r{r}"
                shutil.rmtree(out, ignore_errors=True)
                index, wall, cpu, crit = build(tree, out, w)
                runs[w].append((wall, cpu, crit, index.main_cpu))
                if w == args.workers[-1]:
                    last = out
        base = None
        for w in args.workers:
            wall, cpu, crit = (statistics.median(x[j] for x in runs[w]) for j in range(3))
            base = base or (wall, crit)
            label = f"index build, {w} worker(s), median of {args.repeats}"
            print(
                f"{label:<52} {wall:>9.2f} {cpu:>9.2f} {wall / base[0]:>7.2f} {crit:>12.2f} {crit / base[1]:>7.2f}",
                flush=True,
            )
            print(f"  runs (wall s): {', '.join(f'{x[0]:.2f}' for x in runs[w])}")
            print(f"  runs (crit. CPU s): {', '.join(f'{x[2]:.2f}' for x in runs[w])}")
            print(f"  runs (this process's CPU s, the serial part): {', '.join(f'{x[3]:.2f}' for x in runs[w])}")
        extra = max(1, n_struct // 100)
        make_tree(tree, extra * 1, start=n_struct)
        _, wall, cpu, _ = build(tree, last, args.workers[-1])
        print(f"{f'incremental rebuild, ~{extra} structure(s) added':<52} {wall:>9.2f} {cpu:>9.2f} {'':>7}")
        db_out = tmp / "index_db"
        shutil.rmtree(db_out, ignore_errors=True)
        _, wall, cpu, _ = build(tree, db_out, args.workers[-1], via_db=True)
        print(f"{'index build through the alignment database':<52} {wall:>9.2f} {cpu:>9.2f} {'':>7}")
        count, imports, load = startup(last / "index.json", args.startup_chains, tmp)
        print(f"{f'start-up from the index, {count} chains (load+dataset)':<52} {'':>9} {load:>9.2f} {'':>7}")
        print(f"  (imports in that process: {imports:.2f} s CPU, not counted)")
        for label, path in (("folders", last / "index.json"), ("alignment database", db_out / "index.json")):
            rate = samples_per_s(path, args.preset, args.draws)
            print(f"{f'samples/s, preset {args.preset}, alignments from {label}':<52} {rate:>9.2f}")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
