"""The command line's first second: ``--help``, ``--version``, a rejected option and a missing input
answer without loading torch (CPU time of a child process), every number is checked as it is read (one
``error:`` line, exit status 2), and the constants the parser holds agree with their sources."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from alphafold_mem.cli.main import main

ROOT = Path(__file__).resolve().parents[1]

#: CPU seconds (user + system) a start-up may cost: the bound of issue 45. Loading torch alone costs
#: about 1.5-2 s on this machine, so a command that loads it fails this bound even on an idle machine.
CPU_BOUND_S = 1.0


def _child(*argv: str, cwd: Path = ROOT) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``python -m alphafold_mem.cli ARGV`` in a child; ``(result, its CPU seconds)``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "alphafold_mem.cli", *argv], capture_output=True, text=True, cwd=cwd, env=env
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.mark.parametrize(
    "argv, status",
    [
        (["--version"], 0),
        (["--help"], 0),
        (["predict", "--help"], 0),
        (["train", "--help"], 0),
        (["memory-plan", "--n-res", "-5"], 2),
        (["predict", "missing.fasta", "--out", "OUT"], 2),
    ],
)
def test_start_up_costs_under_a_second_of_cpu(argv, status, tmp_path):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    proc, cpu = _child(*argv, cwd=tmp_path)
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr
    assert cpu <= CPU_BOUND_S, f"{' '.join(argv)}: {cpu:.2f} s CPU"
    assert not (tmp_path / "out").exists()  # a missing input creates no --out


def test_the_parser_loads_nothing_heavy():
    code = (
        "import sys; from alphafold_mem.cli.main import build_parser; build_parser(); import alphafold_mem; "
        "print(sorted(m for m in ('torch', 'numpy', 'lightning', 'Bio', 'pyhmmer') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert out.stdout.strip() == "[]", out.stderr


def test_public_names_load_on_first_use():
    import alphafold_mem
    import alphafold_mem.predict.runner  # noqa: F401  (the subpackage of the same name as the function)
    from alphafold_mem.predict.runner import predict

    assert alphafold_mem.predict is predict and "MemoryPolicy" in dir(alphafold_mem)
    with pytest.raises(AttributeError):
        alphafold_mem.no_such_name  # noqa: B018


@pytest.mark.parametrize(
    "argv, words",
    [
        (["memory-plan", "--n-res", "0"], "argument --n-res: expected a positive integer, got '0'"),
        (["memory-plan", "--n-res", "-5"], "argument --n-res: expected a positive integer, got '-5'"),
        (["memory-plan", "--n-seq", "x"], "argument --n-seq: expected a positive integer, got 'x'"),
        (["memory-plan", "--max-memory", "0GiB"], "argument --max-memory: a memory size must be positive"),
        (["memory-plan", "--preset", "nope"], "argument --preset: invalid choice"),
        (["predict", "x.fasta", "--out", "o", "--num-recycles", "-1"], "--num-recycles: expected an integer >= 0"),
        (["predict", "x.fasta", "--out", "o", "--max-memory", "lots"], "--max-memory: cannot read a memory size"),
        (["predict", "x.fasta", "--out", "o", "--recycle-early-stop-tolerance", "nan"], "expected a number >= 0"),
        (["train", "--lr", "0"], "argument --lr: expected a positive number, got '0'"),
        (["train", "--distillation-prob", "1.5"], "expected a probability between 0 and 1"),
        (["train", "--devices", "0"], "argument --devices: expected a positive integer"),
        (["ablate", "--n-res", "64", "-3"], "argument --n-res: expected a positive integer, got '-3'"),
        (["relax", "a.pdb", "--out", "o", "--cpus", "-1"], "argument --cpus: expected an integer >= 0"),
    ],
)
def test_bad_numbers_end_in_one_line(argv, words, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err, err
    assert err.startswith(f"alphafold-mem {argv[0]}: error: ") and "--help lists the options" in err


#: The shared vocabulary: each option, and the subcommands whose --help must offer it.
SHARED = {
    "--max-memory": ("predict", "memory-plan", "train"),
    "--no-progress": ("predict", "search", "memory-plan", "train"),
    "--precision": ("predict", "memory-plan", "train"),
}
#: Old spellings: hidden from --help.
OLD = {"memory-plan": ("--budget", "--quiet"), "train": ("--no-progress-bar",)}


@pytest.mark.parametrize("command", sorted({c for cs in SHARED.values() for c in cs}))
def test_shared_option_names_in_every_help(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    for option, commands in SHARED.items():
        if command in commands:
            assert option in text, f"{command} --help lacks {option}"
    for option in OLD.get(command, ()):
        assert option not in text, f"{command} --help shows the old spelling {option}"
    if command == "train":
        assert "{fp32,bf16}" in text
    elif command in SHARED["--precision"]:
        assert "{fp32,bf16,bf16-full}" in text


def test_old_spellings_still_work_with_a_note(capsys):
    from alphafold_mem.cli.main import build_parser

    parser = build_parser()
    args = parser.parse_args(["memory-plan", "--budget", "2GiB", "-q"])
    err = capsys.readouterr().err
    assert args.max_memory == 2 * 2**30 and args.progress is False
    assert "note: --budget is now --max-memory" in err and "note: -q is now --no-progress" in err
    args = parser.parse_args(["train", "--no-progress-bar", "--precision", "bf16-mixed"])
    err = capsys.readouterr().err
    assert args.progress is False and args.precision == "bf16-mixed"
    assert "note: --no-progress-bar is now --no-progress" in err and "spelled --precision bf16" in err
    assert parser.parse_args(["train", "--precision", "fp32"]).precision == "32"  # Lightning's name
    assert capsys.readouterr().err == ""


def test_parser_constants_match_their_sources():
    from alphafold_mem.cli import options
    from alphafold_mem.memory.host import MALLOC_SETTINGS
    from alphafold_mem.memory.policy import field_choices
    from alphafold_mem.precision import Precision
    from alphafold_mem.weights import DEFAULT_WEIGHTS

    assert options.PRECISIONS == get_args(Precision) == tuple(field_choices()["precision"])
    assert options.MALLOC_SETTINGS == MALLOC_SETTINGS and options.DEFAULT_WEIGHTS == DEFAULT_WEIGHTS
    assert set(options.TRAIN_PRECISIONS) <= set(options.PRECISIONS)


def test_sizes_print_in_gib():
    from alphafold_mem.units import format_gib, gib_value, parse_size

    assert format_gib(80 * 2**30) == "80.00 GiB" and format_gib(0) == "0.00 GiB"
    assert (
        gib_value(5 * 2**20) == "0.00488"
        and gib_value(25 * 2**20) == "0.0244"
        and format_gib(3 * 2**29, 1) == "1.5 GiB"
    )
    assert parse_size("40GiB") == 40 * 2**30 and parse_size("512 MiB") == 2**29 and parse_size("80GB") == 80 * 10**9
    assert parse_size("1e9") == 10**9
    for bad in ("0", "-1GiB", "lots", "1.5.2GB"):
        with pytest.raises(ValueError):
            parse_size(bad)
