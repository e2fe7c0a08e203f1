"""The one table of input formats (alphafold_mem.data.formats): every suffix in it, with and without
``.gz`` and in upper and lower case, reaches its reader through every entry point (prediction inputs,
``parse_msa``, ``read_structure``, MSA directories, chain folders, ablation structure lookup); an
unknown suffix is one line; the tables that used to be separate are the table's. Plus the input items
of issue 35: binary content named ``.fasta`` (one line, no raw bytes), record ids renamed for file
names (one ``note:`` each), long headers capped in the scores JSON."""

import gzip
import json
import pathlib
import re
import shutil

import pytest

from alphafold_mem.ablation import chains as ablation_chains
from alphafold_mem.data import InputError, fasta, mmcif, msa, parse_msa, pdb, read_structure
from alphafold_mem.data.alignment_layout import alignment_files
from alphafold_mem.data.formats import FORMATS, GZIP_SUFFIX, format_of, require_format, stem, suffixes
from alphafold_mem.data.structure_io import STRUCTURE_SUFFIXES
from alphafold_mem.data.text import binary_content
from alphafold_mem.predict import inputs as predict_inputs
from alphafold_mem.predict.targets import (
    DESCRIPTION_CHARS,
    DESCRIPTION_FULL_CHARS,
    Target,
    collect_targets,
    description_fields,
)
from alphafold_mem.search.stage import database_name

ROOT = pathlib.Path(__file__).parent.parent
CASES = ROOT / "tests" / "data" / "cases"
CRAMBIN = "TTCCPSIVARSNFNVCRLPGTPEAICATYTGCIIIPGATCPGDYAN"
_A3M = f">query\n{CRAMBIN}\n>hit\n{CRAMBIN[:-3]}---\n"
_STO = f"# STOCKHOLM 1.0\nquery {CRAMBIN}\nhit   {CRAMBIN[:-3]}---\n//\n"
#: A small file of each format, by format name.
_CONTENT = {
    "FASTA": f">query\n{CRAMBIN}\n".encode(),
    "A3M": _A3M.encode(),
    "aligned FASTA": _A3M.encode(),
    "Stockholm": _STO.encode(),
    "mmCIF": (CASES / "mmcif-no-entity-records.cif").read_bytes(),
    "PDB": (ROOT / "data" / "pdb" / "1a8o.pdb").read_bytes(),
}
_MODULES = (fasta, msa, mmcif, pdb)


def _variants(fmt):
    """(file name, content) for every suffix of ``fmt``: lower and upper case, plain and gzip."""
    for suffix in fmt.suffixes:
        for name in (f"x{suffix}", f"X{suffix.upper()}"):
            yield name, _CONTENT[fmt.name]
            yield name + GZIP_SUFFIX, gzip.compress(_CONTENT[fmt.name])
            if fmt.kind != "structure":  # the mmCIF/PDB readers open only a lower-case .gz compressed
                yield name + GZIP_SUFFIX.upper(), gzip.compress(_CONTENT[fmt.name])


def _write(folder: pathlib.Path, name: str, data: bytes) -> pathlib.Path:
    path = folder / name
    path.write_bytes(data)
    return path


def test_every_reader_named_in_the_table_exists():
    named = {f.reader for f in FORMATS}
    found = {name for name in named for m in _MODULES if callable(getattr(m, name, None))}
    assert found == named
    every = [s for f in FORMATS for s in f.suffixes]
    assert len(every) == len(set(every)) and all(s == s.lower() and s.startswith(".") for s in every)
    for f in FORMATS:
        for s in f.suffixes:
            assert format_of(f"a.b{s}") is f and format_of(f"a{s.upper()}.gz") is f


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_every_suffix_reaches_its_reader(tmp_path, fmt, monkeypatch):
    for name, data in _variants(fmt):
        path = _write(tmp_path, name, data)
        assert format_of(path) is fmt, name
        kind = predict_inputs.file_kind(str(path))
        if fmt.kind == "structure":
            chains = read_structure(path).chains
            assert len(chains) >= 1, name
            lines = []
            targets, rejected = collect_targets(path, log=lines.append)
            assert kind == "structure" and targets and not rejected, (name, lines)
        else:
            alignment = parse_msa(path, query=CRAMBIN)
            assert alignment.query == CRAMBIN and alignment.depth == (1 if fmt.name == "FASTA" else 2), name
            # on the command line: FASTA and alignments by suffix, aligned FASTA read as FASTA
            assert kind == {"fasta": "fasta", "msa": "msa", "aligned": ""}[fmt.kind], name
            if fmt.kind != "aligned":
                lines = []
                targets, rejected = collect_targets(path, log=lines.append)
                assert [t.sequence for t in targets] == [CRAMBIN] and not rejected, (name, lines)
                assert targets[0].from_alignment == (fmt.kind == "msa"), name
        path.unlink()
    # the dispatch follows the table's reader column
    called = []
    for name in ("parse_a3m", "parse_stockholm"):
        monkeypatch.setattr(msa, name, lambda p, _n=name, **kw: called.append(_n))
    if fmt.kind != "structure":
        parse_msa(_write(tmp_path, f"y{fmt.suffixes[0]}", _CONTENT[fmt.name]))
        assert called == ["parse_a3m" if fmt.name == "FASTA" else fmt.reader]


def test_the_former_tables_are_the_table():
    assert predict_inputs.FASTA_SUFFIXES == suffixes("fasta")
    assert predict_inputs.MSA_SUFFIXES == suffixes("msa")
    assert predict_inputs.STRUCTURE_SUFFIXES == suffixes("structure")
    assert set(STRUCTURE_SUFFIXES) == {s + z for s in suffixes("structure") for z in ("", GZIP_SUFFIX)}
    assert set(ablation_chains._STRUCTURE_SUFFIXES) == set(STRUCTURE_SUFFIXES)
    assert database_name("dbs/uniref90.FASTA.gz") == "uniref90" and database_name("pdb_seqres.txt") == "pdb_seqres"
    assert [database_name(f"u{s}") for s in suffixes("fasta")] == ["u"] * len(suffixes("fasta"))
    assert stem("a.b.sto.GZ", "msa") == "a.b" and stem("a.txt", "msa") == "a.txt"
    # relax names its outputs by this stem
    assert {stem(f"d/1abc{s.upper()}", "structure") for s in STRUCTURE_SUFFIXES} == {"1abc"}


def test_chain_folders_msa_dirs_and_ablations_find_every_alignment_and_structure_suffix(tmp_path):
    folder = tmp_path / "alignments" / "1abc_A"
    folder.mkdir(parents=True)
    names = []
    for fmt in FORMATS:
        if fmt.kind == "msa":
            for k, suffix in enumerate(fmt.suffixes):
                for tag, gz in (("p", ""), ("z", GZIP_SUFFIX), ("Z", GZIP_SUFFIX.upper())):
                    name = f"bfd_{fmt.name}{k}{tag}{suffix.upper() if tag == 'Z' else suffix}{gz}"
                    _write(folder, name, gzip.compress(_CONTENT[fmt.name]) if gz else _CONTENT[fmt.name])
                    names.append(name)
    _write(folder, "notes.txt", b"not an alignment")
    assert sorted(p.name for p, _ in alignment_files(folder)) == sorted(names)
    for p, _ in alignment_files(folder):
        assert parse_msa(p, query=CRAMBIN).depth == 2
    fasta_in = _write(tmp_path, "in.fasta", f">1abc_A\n{CRAMBIN}\n".encode())
    for suffix in suffixes("msa"):
        msa_dir = tmp_path / f"msas{suffix}"
        msa_dir.mkdir()
        _write(msa_dir, f"1abc_A{suffix}.gz", gzip.compress(_CONTENT[format_of("a" + suffix).name]))
        targets, rejected = collect_targets(fasta_in, msa_dir=msa_dir, log=lambda line: None)
        assert not rejected and targets[0].msa_depth == 2, suffix
    for suffix in STRUCTURE_SUFFIXES:
        d = tmp_path / f"s{suffix}" / "mmcif"
        d.mkdir(parents=True)
        fmt = format_of("a" + suffix)
        data = _CONTENT[fmt.name]
        _write(d, f"1abc{suffix}", gzip.compress(data) if suffix.endswith(GZIP_SUFFIX) else data)
        assert ablation_chains._structure_for("1abc_A", d.parent / "in.fasta") == d / f"1abc{suffix}"


def test_an_unknown_suffix_is_one_line(tmp_path):
    for call, path, what in (
        (parse_msa, tmp_path / "x.txt", "alignment"),
        (read_structure, tmp_path / "x.xyz.gz", "structure"),
        (read_structure, tmp_path / "noext", "structure"),
    ):
        with pytest.raises(InputError) as exc:
            call(path)
        message = str(exc.value)
        assert "\n" not in message and message.startswith(f"{path}: unknown {what} format"), message
        assert ".gz" in message and (".a3m" in message if what == "alignment" else ".cif" in message)
    assert "(no suffix)" in str(pytest.raises(InputError, require_format, "noext").value)
    fasta_in = _write(tmp_path, "in.fasta", f">q\n{CRAMBIN}\n".encode())
    given = _write(tmp_path, "q.msa", _A3M.encode())
    lines = []
    targets, rejected = collect_targets(fasta_in, msa=given, log=lines.append)
    assert targets == [] and [line for line in lines if line.startswith("error:")] == [
        f"error: {given}: unknown alignment format '.msa' (expected {', '.join(suffixes('msa', 'aligned', 'fasta'))}, "
        "optionally .gz) (MSA for record 'q')"
    ]
    # an unknown suffix on the command line is still read as FASTA, in a directory by its content
    odd = _write(tmp_path, "q.txt", f">odd\n{CRAMBIN}\n".encode())
    assert [t.name for t in collect_targets(odd, log=lambda line: None)[0]] == ["odd"]


# -- issue 35: binary content ---------------------------------------------------------------------
def _printable(line: str) -> bool:
    return line.isascii() and line.isprintable()


def test_binary_file_named_fasta_is_one_line(tmp_path):
    path = CASES / "binary-named.fasta"
    lines = []
    targets, rejected = collect_targets(path, log=lines.append)
    assert targets == [] and len(rejected) == 1
    assert lines == [f"error: {path}: binary content, not text (a NUL byte at offset 8); expected FASTA text"]
    # no NUL, but mostly control and invalid bytes; and gzip data not named .gz; and UTF-16
    noise = bytes((7 * k * k + 3) % 256 or 1 for k in range(2000))
    for name, data, part in (
        ("noise.fa", noise + b"\n>x\n" + noise, "control bytes in the first"),
        ("packed.fasta", gzip.compress(f">q\n{CRAMBIN}\n".encode()), "rename it to end in .gz, or decompress it"),
        ("wide.fasta", f">q\n{CRAMBIN}\n".encode("utf-16"), "UTF-16 text"),
        ("notgz.fasta.gz", f">q\n{CRAMBIN}\n".encode(), "named .gz but not gzip-compressed"),
    ):
        bad = _write(tmp_path, name, data)
        lines = []
        targets, rejected = collect_targets(bad, log=lines.append)
        assert targets == [] and len(rejected) == 1 and len(lines) == 1, (name, lines)
        assert lines[0].startswith(f"error: {bad}: ") and part in lines[0] and _printable(lines[0]), (name, lines)
        with pytest.raises(InputError, match=re.escape(part)):
            parse_msa(_write(tmp_path, "as.a3m" + (GZIP_SUFFIX if name.endswith(GZIP_SUFFIX) else ""), data))
    # text in Latin-1 / Windows-1252 (accents, curly quotes) is text, in any amount of it
    accents = "\xe9" * 30
    latin = f">q prot\xe9ine \x93cod\xe9e\x94 \xe0 {accents}\n{CRAMBIN}\n".encode("latin-1")
    assert binary_content(latin) is None and binary_content(latin * 100) is None
    latin_targets = collect_targets(_write(tmp_path, "latin.fasta", latin), log=lambda line: None)[0]
    assert [t.sequence for t in latin_targets] == [CRAMBIN]
    assert binary_content(("\xe9".encode() * 40000)[:65535]) is None  # UTF-8 cut inside a character


# -- issue 35: record ids renamed for file names ------------------------------------------------------
def test_every_renamed_record_id_is_logged_once(tmp_path):
    path = _write(
        tmp_path,
        "in.fasta",
        f">sp|P69905|HBA_HUMAN Hemoglobin\n{CRAMBIN}\n>plain\n{CRAMBIN}\n>{'a' * 70}\n{CRAMBIN}\n".encode(),
    )
    lines = []
    targets, _ = collect_targets(path, log=lines.append)
    assert [t.name for t in targets] == ["sp_P69905_HBA_HUMAN", "plain", "a" * 64]
    renames = [line for line in lines if "written as" in line]
    assert renames == [
        f"note: {path}:1: record 'sp|P69905|HBA_HUMAN' written as 'sp_P69905_HBA_HUMAN' (output file names keep "
        "only the letters A-Z a-z, digits and . _ -, at most 64 characters)",
        f"note: {path}:5: record '{'a' * 70}' written as '{'a' * 64}' (output file names keep only the letters "
        "A-Z a-z, digits and . _ -, at most 64 characters)",
    ]
    a3m = _write(tmp_path, "q.a3m", _A3M.replace(">query", ">my/query").encode())
    cif = tmp_path / "my model.cif"
    shutil.copy(CASES / "mmcif-no-entity-records.cif", cif)
    lines = []
    targets, _ = collect_targets([a3m, cif], log=lines.append)
    assert [t.name for t in targets] == ["my_query", "my"]
    assert [line.split(" (output")[0] for line in lines if "written as" in line] == [
        f"note: {a3m}: record 'my/query' written as 'my_query'",
        f"note: {cif}: record 'my model_A' written as 'my'",
    ]


# -- issue 35: long headers in the scores JSON --------------------------------------------------------
def test_description_in_the_scores_json_is_capped():
    assert description_fields("short one") == {"description": "short one"}
    exact = "d" * DESCRIPTION_CHARS
    assert description_fields(exact) == {"description": exact}
    long = "h" * (DESCRIPTION_FULL_CHARS + 5000)
    fields = description_fields(long)
    assert fields["description"] == "h" * DESCRIPTION_CHARS + f" [... {len(long) - DESCRIPTION_CHARS} more characters]"
    assert fields["description_full"] == "h" * DESCRIPTION_FULL_CHARS + " [... 5000 more characters]"
    assert fields["description_length"] == len(long)
    middle = "m" * (DESCRIPTION_CHARS + 1)
    assert description_fields(middle)["description_full"] == middle
    t = Target("t", CRAMBIN, "x" * 50_000_000, "in.fasta:1")
    assert len(json.dumps(t.description_fields())) < DESCRIPTION_FULL_CHARS + 1000
