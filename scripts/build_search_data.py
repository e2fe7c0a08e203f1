"""Build the small real search databases and template-hit files shipped in ``data/search`` and
``tests/data/templates`` from the example data (see ``data/MANIFEST.md``).

    python scripts/build_search_data.py

Writes:

* ``data/search/homologs.fasta``: every hit sequence (gaps removed, upper case) of the shipped MSAs
  ``data/alignments/*/*`` (query rows left out), deduplicated; header ``<row name> source=<folder>``;
* ``data/search/pdb_seqres.txt``: the protein chains of ``data/mmcif/*.cif`` and
  ``data/search/mmcif/*.cif`` in wwPDB ``pdb_seqres.txt`` layout (``>102m_A mol:protein length:154  MYOGLOBIN``);
* ``data/search/A0A1A7XAT7.fasta``: the first hit of ``data/alignments/102m_A/non_pairing.a3m`` (a fish
  myoglobin, 28 % identical to 102M A) as a query;
* ``tests/data/templates/{102m_A,A0A1A7XAT7}_hits.sto``: hmmsearch (pyhmmer, AF2's options) of the profile
  of ``data/alignments/102m_A/non_pairing.a3m`` / of A0A1A7XAT7's jackhmmer MSA against homologs.fasta,
  against that pdb_seqres file;
* ``tests/data/templates/{102m_A,A0A1A7XAT7}_hits.hhr``: the same alignments written in HH-suite's ``.hhr`` text
  format (E-value and score from hmmsearch; ``Probab`` and ``Sum_probs`` are not computed by
  hmmsearch: Probab is written as 100, Sum_probs as the aligned-column count).
"""

from __future__ import annotations

import io
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def homologs(out: pathlib.Path) -> int:
    from Bio import AlignIO

    seen, lines = set(), []
    for folder in sorted((ROOT / "data" / "alignments").iterdir()):
        for path in sorted(folder.iterdir()):
            if path.suffix == ".a3m":
                records, name = [], None
                for line in path.read_text().splitlines():
                    if line.startswith(">"):
                        name = line[1:].split()[0]
                        records.append([name, ""])
                    elif records:
                        records[-1][1] += line.strip()
                rows = records[1:]
            elif path.suffix == ".sto":
                rows = [[r.id, str(r.seq)] for r in AlignIO.read(str(path), "stockholm")][1:]
            else:
                continue
            for name, row in rows:
                seq = row.replace("-", "").replace(".", "").upper()
                if seq and seq not in seen:
                    seen.add(seq)
                    lines.append(f">{name} source={folder.name}\n{seq}\n")
    out.write_text("".join(lines))
    return len(lines)


def seqres(out: pathlib.Path) -> int:
    from Bio.PDB.MMCIF2Dict import MMCIF2Dict

    from alphafold_mem.data.mmcif import read_mmcif

    lines = []
    files = sorted((ROOT / "data" / "mmcif").glob("*.cif")) + sorted((ROOT / "data" / "search" / "mmcif").glob("*.cif"))
    for path in files:
        if "assembly" in path.name:
            continue  # a re-processed assembly file, not a PDB entry
        structure = read_mmcif(path)
        d = MMCIF2Dict(str(path))
        names = dict(zip(d.get("_entity.id", []), d.get("_entity.pdbx_description", [])))
        asym_entity = dict(zip(d.get("_struct_asym.id", []), d.get("_struct_asym.entity_id", [])))
        for chain in structure.chains.values():
            title = names.get(asym_entity.get(chain.label_asym_id, ""), "").strip("'\"")
            lines.append(f">{chain.name} mol:protein length:{len(chain)}  {title}\n{chain.sequence}\n")
    out.write_text("".join(lines))
    return len(lines)


def homolog_query(out: pathlib.Path) -> str:
    """The first hit of the 102m_A MSA (UniProt A0A1A7XAT7, residues 19-172, a fish myoglobin) as a query."""
    lines = (ROOT / "data/alignments/102m_A/non_pairing.a3m").read_text().splitlines()
    header, row = lines[2][1:].split("\t"), lines[3]
    seq = row.replace("-", "").upper()
    out.write_text(
        f">{header[0]} myoglobin homolog: UniProt {header[0]} residues {header[7]}-{header[8]}, "
        f"first hit of data/alignments/102m_A/non_pairing.a3m\n{seq}\n"
    )
    return seq


def hits_files(seqres_path: pathlib.Path, out_dir: pathlib.Path, target: str, msa) -> int:
    import pyhmmer

    from alphafold_mem.search.hmmsearch import build_profile
    from alphafold_mem.search.settings import HMMSEARCH_OPTIONS

    query = msa.query
    hmm = build_profile(msa, target)
    with pyhmmer.easel.SequenceFile(str(seqres_path), digital=True, alphabet=hmm.alphabet) as sf:
        block = sf.read_block()
    hits = next(pyhmmer.hmmer.hmmsearch(hmm, block, cpus=1, Z=len(block), **HMMSEARCH_OPTIONS))
    hits.sort()
    buf = io.BytesIO()
    hits.to_msa(hmm.alphabet, trim=True, all_consensus_cols=True).write(buf, "stockholm")
    (out_dir / f"{target}_hits.sto").write_text(buf.getvalue().decode())
    domains = [(h, d) for h in hits for d in h.domains if d.included]
    text = [
        f"Query         {target}\nMatch_columns {len(query)}\nNo_of_seqs    {msa.depth} out of {msa.depth}\n"
        f"Neff          1.0\nSearched_HMMs {len(block)}\nDate          (written by scripts/build_search_data.py)\n"
        "Command       hmmsearch alignments written in HH-suite .hhr layout\n\n"
        " No Hit                             Prob E-value P-value  Score    SS Cols Query HMM  Template HMM\n"
    ]
    for k, (h, d) in enumerate(domains, 1):
        a = d.alignment
        cols = sum(1 for c in a.hmm_sequence if c != ".")
        text.append(
            f"{k:3d} {h.name.decode() if isinstance(h.name, bytes) else h.name:<30} 100.0 {h.evalue:7.2g} "
            f"{h.pvalue:7.2g} {h.score:6.1f}   0.0 {cols:4d} {a.hmm_from:4d}-{a.hmm_to:<4d} "
            f"{a.target_from:4d}-{a.target_to:<4d}({a.target_length})\n"
        )
    text.append("\n")
    for k, (h, d) in enumerate(domains, 1):
        a = d.alignment
        name = h.name.decode() if isinstance(h.name, bytes) else h.name
        desc = h.description.decode() if isinstance(h.description, bytes) else (h.description or "")
        q_row, qi = [], a.hmm_from - 1
        for c in a.hmm_sequence:
            if c == ".":
                q_row.append("-")
            else:
                q_row.append(query[qi])
                qi += 1
        t_row = a.target_sequence.upper()
        ident = sum(x == y for x, y in zip(q_row, t_row) if x != "-")
        cols = sum(1 for x, y in zip(q_row, t_row) if x != "-" and y != "-")
        text.append(
            f"No {k}\n>{name} {desc}\nProbab=100.00  E-value={h.evalue:.2g}  Score={h.score:.2f}  "
            f"Aligned_cols={cols}  Identities={round(100 * ident / max(1, cols))}%  Similarity=0.000  "
            f"Sum_probs={cols:.1f}  Template_Neff=1.000\n\n"
        )
        qs, ts = a.hmm_from, a.target_from
        for start in range(0, len(q_row), 80):
            qb, tb = "".join(q_row[start : start + 80]), t_row[start : start + 80]
            qe = qs + sum(c != "-" for c in qb) - 1
            te = ts + sum(c != "-" for c in tb) - 1
            text.append(f"Q {target:<14} {qs:4d} {qb} {qe:4d} ({len(query)})\n")
            text.append(f"T {name:<14} {ts:4d} {tb} {te:4d} ({a.target_length})\n\n")
            qs, ts = qe + 1, te + 1
    text.append("Done!\n")
    (out_dir / f"{target}_hits.hhr").write_text("".join(text))
    return len(domains)


def main() -> int:
    out = ROOT / "data" / "search"
    out.mkdir(parents=True, exist_ok=True)
    print(f"homologs.fasta: {homologs(out / 'homologs.fasta')} sequences")
    print(f"pdb_seqres.txt: {seqres(out / 'pdb_seqres.txt')} chains")
    tdir = ROOT / "tests" / "data" / "templates"
    tdir.mkdir(parents=True, exist_ok=True)
    from alphafold_mem.data import parse_msa
    from alphafold_mem.data.msa import parse_a3m_string
    from alphafold_mem.search.jackhmmer import search_database

    query_msa = parse_msa(ROOT / "data/alignments/102m_A/non_pairing.a3m")
    print(f"102m_A_hits.sto/.hhr: {hits_files(out / 'pdb_seqres.txt', tdir, '102m_A', query_msa)} hits")
    seq = homolog_query(out / "A0A1A7XAT7.fasta")
    found = search_database("A0A1A7XAT7", seq, out / "homologs.fasta", progress=False)
    msa = parse_a3m_string("".join(f">{n}\n{r}\n" for n, r in zip(found.names, found.rows)))
    print(
        f"A0A1A7XAT7 MSA: {msa.depth} rows; A0A1A7XAT7_hits.sto/.hhr: "
        f"{hits_files(out / 'pdb_seqres.txt', tdir, 'A0A1A7XAT7', msa)} hits"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
