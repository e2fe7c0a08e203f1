"""The planner on complexes (issues 42 item 3, 43 item 6): the fake batch carries the complex's chain
features, the estimate of the AF2-Multimer model matches its measured peak as closely as the
monomer's, ``memory-plan --chains / --fasta`` plans a complex under the multimer preset and prints
the flags (the 4,539-residue, 12-chain case of clami66/AF_unmasked #6 on a 24 GB card), and the
predict pre-flight of a complex agrees with ``memory-plan``."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from alphafold_mem import AlphaFold, AutoPolicy, MemoryPolicy, bind, model_config
from alphafold_mem.cli import main
from alphafold_mem.memory import track_peak
from alphafold_mem.planner import Chains, estimate_breakdown, feature_batch, multimer_sizes
from alphafold_mem.predict import preflight
from alphafold_mem.testing import random_features

N_RES, N_SEQ, N_EXTRA, N_TEMPL = 24, 6, 10, 2


def test_chains_number_as_af2_multimer():
    c = Chains((3, 2, 3), (1, 2, 1))
    f = c.features()
    assert f["asym_id"].tolist() == [1, 1, 1, 2, 2, 3, 3, 3]
    assert f["entity_id"].tolist() == [1, 1, 1, 2, 2, 1, 1, 1]
    assert f["sym_id"].tolist() == [1, 1, 1, 1, 1, 2, 2, 2]
    assert f["residue_index"].tolist() == [0, 1, 2, 0, 1, 0, 1, 2]
    assert c.n_res == 8 and c.num_entities == 2 and "3 chains (2 entities), 8 residues" in c.describe()
    # equal lengths are not equal chains: every chain of from_lengths is its own entity
    assert Chains.from_lengths((5, 5)).entity_ids == (1, 2)
    for bad in [((),), ((3, 0),), ((3, 3), (2, 1)), ((3, 3), (1,))]:
        with pytest.raises(ValueError):
            Chains(*bad)


def test_fake_batch_carries_the_complex():
    cfg = model_config("tiny_multimer")
    chains = Chains((5, 7, 5), (1, 2, 1))
    batch = feature_batch(cfg, 17, 4, 6, 1, chains=chains)
    assert Chains.of_batch(batch) == chains
    assert batch["residue_index"].tolist() == list(range(5)) + list(range(7)) + list(range(5))
    one = feature_batch(cfg, 17, 4, 6, 1)  # no chains: one chain of N_res
    assert Chains.of_batch(one) == Chains((17,))
    with pytest.raises(ValueError, match="17"):
        feature_batch(cfg, 17, 4, 6, 1, chains=Chains((5, 5)))
    # multimer sizes: the preset's MSA clusters, extra sequences and templates unless given
    big = model_config("model_1_multimer_v3")
    assert multimer_sizes(big, chains) == (17, 508, 2048, 4)
    assert multimer_sizes(big, chains, n_seq=512, n_templ=0) == (17, 512, 2048, 0)
    assert multimer_sizes(model_config("model_5_multimer_v3"), chains)[2] == 1152


@pytest.mark.parametrize(
    "policy",
    [MemoryPolicy.reference(), MemoryPolicy.low_memory_inference(chunk_size=4)],
    ids=["reference", "low-memory"],
)
def test_multimer_estimate_as_close_to_measured_as_the_monomer(policy):
    """The estimate of the multimer model on a 3-chain, 2-entity complex and of the monomer at the same
    sizes each within 5 % of the storage counter (tests/test_memory_estimate.py's bound)."""
    errors = {}
    for preset in ("tiny", "tiny_multimer"):
        cfg = model_config(preset, num_recycles=0)
        torch.manual_seed(0)
        model = AlphaFold(cfg).eval()
        batch = random_features(cfg, N_RES, N_SEQ, N_EXTRA, n_templ=N_TEMPL, chains=(1, 2, 1))
        chains = Chains.of_batch(batch) if cfg.multimer else None
        if cfg.multimer:
            assert chains.lengths == (8, 8, 8) and chains.entity_ids == (1, 2, 1)
        bind(model, policy)
        with torch.inference_mode(), track_peak() as mem:
            del model(batch)["final_atom_positions"]
        est = estimate_breakdown(cfg, policy, N_RES, N_SEQ, N_EXTRA, N_TEMPL, chains=chains)
        errors[preset] = abs(est.activations - mem.peak) / mem.peak
        assert est.parameters == sum(p.numel() * 4 for p in model.parameters())
    assert errors["tiny_multimer"] <= 0.05 and errors["tiny"] <= 0.05, errors


def _plan_json(capsys, argv) -> tuple[int, dict]:
    code = main(["memory-plan", *argv, "--json", "--no-progress"])
    return code, json.loads(capsys.readouterr().out)


def test_memory_plan_chains_and_fasta(capsys, tmp_path):
    base = ["--preset", "tiny_multimer", "--max-memory", "1GB", "--device", "cpu", "--precision", "fp32"]
    code, plan = _plan_json(capsys, ["--chains", "9,9,6", *base])
    assert code == 0 and plan["config"]["n_res"] == 24 and plan["config"]["preset"] == "tiny_multimer"
    assert plan["config"]["chains"] == {"lengths": [9, 9, 6], "entity_ids": [1, 2, 3]}
    assert (plan["config"]["n_seq"], plan["config"]["n_extra"], plan["config"]["n_templ"]) == (16, 32, 2)
    assert plan["recommended"]["flags"].endswith("--preset tiny_multimer")
    # the file's records are one complex; ':' splits a record; identical sequences are one entity
    fasta = tmp_path / "complex.fasta"
    fasta.write_text(">H\nMKTAYIAKQR\n>L\nGSHMLEDPVA:MKTAYIAKQR\n")
    code, plan = _plan_json(capsys, ["--fasta", str(fasta), *base, "--n-seq", "5"])
    assert code == 0 and plan["config"]["chains"] == {"lengths": [10, 10, 10], "entity_ids": [1, 2, 1]}
    assert plan["config"]["n_seq"] == 5
    # the text output: the complex, the table and the flags
    assert main(["memory-plan", "--chains", "30,20", *base, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "complex: 2 chains (2 entities), 50 residues: 30+20" in out and "default for a complex" not in out
    assert "tiny_multimer inference: N_res 50, N_seq 16, N_extra 32, N_templ 2" in out
    assert "peak GiB" in out and "flags: alphafold-mem predict " in out


def test_memory_plan_complex_errors(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main(["memory-plan", "--chains", "10,0"])
    assert exit_.value.code == 2 and "--chains: expected chain lengths" in capsys.readouterr().err
    assert main(["memory-plan", "--chains", "10,10", "--n-res", "20", "--max-memory", "1GB"]) == 2
    assert "memory-plan: --n-res and --chains" in capsys.readouterr().err
    dna = tmp_path / "dna.fasta"
    dna.write_text(">A\nMKTAYIAKQR\n>B\nACGTACGTACGTACGT\n")
    assert main(["memory-plan", "--fasta", str(dna), "--max-memory", "1GB"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "dna.fasta" in err and "Traceback" not in err
    # a monomer preset plans the chains as one chain, and says so
    assert main(["memory-plan", "--chains", "10,10", "--preset", "tiny", "--max-memory", "1GB", "--no-progress"]) == 0
    assert "tiny is a monomer preset: the 2 chains are planned as one chain of 20 residues" in capsys.readouterr().out


def test_af_unmasked_12_chain_complex_on_a_24gb_card(capsys):
    """clami66/AF_unmasked #6: a 4,539-residue complex of 12 chains, 512 MSA rows and 4 templates ran
    out of memory on a 24 GB card (RTX 4090); the plan finds a setting that fits and prints its flags."""
    lengths = [378] * 11 + [381]
    argv = ["--chains", ",".join(map(str, lengths)), "--n-seq", "512", "--n-templ", "4"]
    argv += ["--max-memory", "24GB", "--device", "cuda", "--precision", "bf16", "--no-progress"]
    assert main(["memory-plan", *argv]) == 0
    out = capsys.readouterr().out
    assert "complex: 12 chains (12 entities), 4539 residues" in out
    assert "preset model_1_multimer_v3 (the multimer model, the default for a complex; --preset to change)" in out
    assert "model_1_multimer_v3 inference: N_res 4539, N_seq 512, N_extra 2048, N_templ 4" in out
    flags = next(line for line in out.splitlines() if line.startswith("flags: alphafold-mem predict "))
    assert "--preset model_1_multimer_v3" in flags and "--precision bf16" in flags
    code, plan = _plan_json(capsys, argv)
    rec = plan["recommended"]
    assert code == 0 and rec["fits"] and rec["peak_bytes"] <= plan["config"]["usable_budget_bytes"]
    assert plan["config"]["budget_bytes"] == 24 * 10**9


@pytest.mark.parametrize("precision", ["bf16-full"])
def test_preflight_of_a_complex_agrees_with_memory_plan(capsys, precision):
    """predict's pre-flight of a complex under multimer weights (the same chooser, sizes and chain
    features) recommends what ``memory-plan --chains`` recommends, with the same peak."""
    cfg = model_config("tiny_multimer")
    chains = Chains((40, 40, 25), (1, 1, 2))
    budget = 60 * 2**20
    request = AutoPolicy(precision=precision, max_memory=budget)
    sizes, fit = preflight.check_complex(cfg, chains, 300, request, torch.device("cpu"))
    assert sizes == (105, 16, 32, 1)  # predict's sizes: 16 clusters, 32 extra rows, one placeholder template
    argv = ["--chains", "40,40,25", "--preset", "tiny_multimer", "--n-templ", "1", "--device", "cpu"]
    code, plan = _plan_json(capsys, argv + ["--max-memory", f"{budget}B", "--precision", precision])
    # memory-plan numbers every chain as its own entity; the entity ids change values, not shapes
    assert code == (0 if fit.fits else 1)
    if fit.fits:
        assert plan["recommended"]["peak_bytes"] == fit.need
        assert plan["recommended"]["policy"] == json.loads(json.dumps(dataclasses.asdict(fit.policy)))
    same = preflight.check(cfg, sizes, request, torch.device("cpu"), chains=Chains.from_lengths((40, 40, 25)))
    assert same.need == fit.need
    with pytest.raises(ValueError, match="105"):
        preflight.check(cfg, (100, 16, 32, 1), request, torch.device("cpu"), chains=chains)
