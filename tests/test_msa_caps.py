"""MSA readers stop at the row cap (A3M and Stockholm, plain and gz, from a file or a span of an
alignment database) and give what a whole-file parse truncated to the cap gives."""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path

import numpy as np
import pytest

from alphafold_mem.data.errors import InputError
from alphafold_mem.data.msa import parse_msa

DATA = Path(__file__).resolve().parents[1] / "data"
SHIPPED = sorted((DATA / "alignments").glob("*/*.a3m")) + sorted((DATA / "alignments").glob("*/*.sto"))

INTERLEAVED = """# STOCKHOLM 1.0
#=GS q DE the query
#=GS b DE hit b
q MKV-
a MRV-
b MKV-
c M-VA
#=GC RF xxx.

q LWA
a LWA
b LWA
c LFA
#=GC RF xxx
//
"""


def _same(a, b) -> None:
    assert a.sequences == b.sequences
    assert a.descriptions == b.descriptions
    np.testing.assert_array_equal(a.deletion_matrix, b.deletion_matrix)


def _truncated(msa, cap):
    return msa if cap is None else msa.truncate(cap)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_capped_read_equals_whole_parse_truncated(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = parse_msa(path)
        for cap in (1, 2, 3, 7, None):
            _same(parse_msa(path, max_sequences=cap), _truncated(whole, cap))


def test_interleaved_stockholm_and_duplicates(tmp_path):
    path = tmp_path / "x.sto"
    path.write_text(INTERLEAVED)
    whole = parse_msa(path)
    assert whole.sequences == ("MKVLWA", "MRVLWA", "M-VLFA")  # b repeats q: removed
    for cap in (1, 2, 3):  # cap 3 needs a second read (the duplicate b within the first three rows)
        _same(parse_msa(path, max_sequences=cap), whole.truncate(cap))
    assert parse_msa(path, max_sequences=1).descriptions == ("q the query",)


def test_a3m_reading_stops_at_the_cap(tmp_path):
    path = tmp_path / "x.a3m"
    path.write_text(">q\nMKV\n>a\nMRV\n>a2\nMRV\n>b\nMKVAAAAA\n")  # row 4 is malformed
    with pytest.raises(InputError, match="row 4 has 8 match columns"):
        parse_msa(path)
    assert parse_msa(path, max_sequences=2).sequences == ("MKV", "MRV")  # row 4 never read
    with pytest.raises(InputError, match="row 4"):
        parse_msa(path, max_sequences=3)  # the duplicate a2 does not count: row 4 is read


@pytest.mark.parametrize("name", ["uniref90_hits.sto", "bfd_uniclust_hits.a3m", "mgnify_hits.sto"])
@pytest.mark.parametrize("compress", [False, True])
def test_span_of_a_database_equals_the_file(tmp_path, name, compress):
    src = DATA / "alignments" / "2q2k_A" / name
    data = src.read_bytes()
    stored = name + (".gz" if compress else "")
    blob = gzip.compress(data) if compress else data
    db = tmp_path / "x.db"
    db.write_bytes(b"junk before" + blob + b"junk after")
    for cap in (2, None):
        _same(parse_msa(db, span=(11, len(blob)), name=stored, max_sequences=cap), parse_msa(src, max_sequences=cap))
