"""Multimer training draws chains and interfaces by cluster (alphafold_mem.data.complex_sampling):
the weights of a small cluster file equal hand-computed values, seeded draws match the weights,
without a cluster file each chain is its own cluster, and the multimer data module draws its
complexes so (``--cluster-file``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from alphafold_mem.config import model_config
from alphafold_mem.data.complex_examples import load_complex_examples
from alphafold_mem.data.complex_sampling import ComplexSampler, interface_pairs, sampling_items
from alphafold_mem.data.multimer_crop import MultimerCrop
from alphafold_mem.data.sampling import read_cluster_file
from alphafold_mem.train import TrainConfig, runner
from alphafold_mem.train.data_module import DataOptions
from alphafold_mem.train.multimer_data import ComplexDraws, MultimerDataModule

from .conftest import REPO_DATA

#: Four complexes: chain ids, interfaces as pairs of chain positions.
COMPLEXES = [
    (["1abc_A", "1abc_B"], [(0, 1)]),
    (["2def_A", "2def_B", "2def_C"], [(0, 1), (1, 2)]),
    (["3ghi_A", "3ghi_B"], [(0, 1)]),
    (["4jkl_A", "4jkl_B"], [(0, 1)]),  # A in cluster 2, B in cluster 1: the pair (2, 1) is (1, 2)
]
#: Cluster 1: 1abc_A 2def_A 3ghi_A 4jkl_B; cluster 2: 1abc_B 2def_B 4jkl_A; 2def_C, 3ghi_B unlisted.
CLUSTER_FILE = "1abc_A 2def_A 3GHI_A 4jkl_B\n1abc_B 2def_B 4jkl_A\n"
C1, C2 = "cluster 1", "cluster 2"
#: By hand: a chain 0.5 * 3 / N, an interface 1 * 3 * 2 / N (AF3 Suppl. 2.5.1, protein chains).
EXPECTED = {
    ("1abc_A",): 1.5 / 4,
    ("1abc_B",): 1.5 / 3,
    ("1abc_A", "1abc_B"): 6 / 3,  # (C1, C2): 1abc, 2def A-B, 4jkl
    ("2def_A",): 1.5 / 4,
    ("2def_B",): 1.5 / 3,
    ("2def_C",): 1.5,
    ("2def_A", "2def_B"): 6 / 3,
    ("2def_B", "2def_C"): 6.0,  # (C2, 2def_C)
    ("3ghi_A",): 1.5 / 4,
    ("3ghi_B",): 1.5,
    ("3ghi_A", "3ghi_B"): 6.0,  # (C1, 3ghi_B)
    ("4jkl_A",): 1.5 / 3,
    ("4jkl_B",): 1.5 / 4,
    ("4jkl_A", "4jkl_B"): 6 / 3,
}


@pytest.fixture
def clusters(tmp_path):
    path = tmp_path / "clusters.txt"
    path.write_text(CLUSTER_FILE)
    return read_cluster_file(path)


def test_weights_equal_hand_computed_values(clusters):
    items = sampling_items(COMPLEXES, clusters)
    assert {it.chains: it.weight for it in items} == pytest.approx(EXPECTED, rel=1e-12)
    assert len(items) == len(EXPECTED)
    by = {it.chains: it for it in items}
    assert by[("4jkl_A", "4jkl_B")].cluster == by[("1abc_A", "1abc_B")].cluster == (C1, C2)  # unordered pair
    assert by[("2def_B", "2def_C")].cluster == ("2def_C", C2)  # sorted
    assert [it.complex_index for it in items] == [0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    # every chain cluster, and every interface cluster, carries the same total weight
    totals: dict = {}
    for it in items:
        totals[it.cluster] = totals.get(it.cluster, 0.0) + it.weight
    assert sorted({round(v, 12) for k, v in totals.items() if len(k) == 1}) == [1.5]
    assert sorted({round(v, 12) for k, v in totals.items() if len(k) == 2}) == [6.0]


def test_without_a_cluster_file_each_chain_is_its_own_cluster():
    items = sampling_items(COMPLEXES)
    assert all(it.cluster == tuple(sorted(it.chains)) for it in items)
    assert {it.weight for it in items if len(it.chains) == 1} == {1.5}
    assert {it.weight for it in items if len(it.chains) == 2} == {6.0}


def test_seeded_draws_match_the_weights(clusters):
    """20,000 draws with the training stream's generators (``default_rng([seed, 7, k])``): Pearson's
    chi-square over the 14 items stays below ``df + 6 sqrt(2 df)`` (df = 13: 43.6; a 6-sigma excursion
    of the chi-square's normal approximation; measured 15.4), and the same k draws the same item."""
    sampler = ComplexSampler(sampling_items(COMPLEXES, clusters))
    n = 20_000
    drawn = [sampler.draw(np.random.default_rng([5, 7, k])) for k in range(n)]
    index = {it.chains: i for i, it in enumerate(sampler.items)}
    counts = np.bincount([index[it.chains] for it in drawn], minlength=len(sampler.items))
    expected = n * sampler.probabilities
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df = len(sampler.items) - 1
    assert chi2 < df + 6 * np.sqrt(2 * df), chi2
    assert sampler.draw(np.random.default_rng([5, 7, 123])) == drawn[123]
    np.testing.assert_allclose(
        sampler.probabilities, [EXPECTED[it.chains] / sum(EXPECTED.values()) for it in sampler.items]
    )
    assert sampler.complex_probabilities(4).sum() == pytest.approx(1.0)


def test_interfaces_are_chains_with_calpha_within_the_threshold():
    n = 3
    pos = np.zeros((3 * n, 37, 3), np.float32)
    mask = np.zeros((3 * n, 37), np.float32)
    mask[:, 1] = 1.0  # Cα only
    pos[:n, 1, 0] = np.arange(n) * 3.8  # chain 1 on the x axis
    pos[n : 2 * n, 1, 0] = np.arange(n) * 3.8 + 9.0 + 3.8 * (n - 1)  # chain 2: 9 Å past chain 1's end
    pos[2 * n :, 1, 0] = 100.0  # chain 3 far away ...
    pos[2 * n, 1] = pos[0, 1]  # ... but for one residue, unresolved, on chain 1's first
    mask[2 * n, 1] = 0.0
    asym = np.repeat([1, 2, 3], n)
    assert interface_pairs(pos, mask, asym, 10.0) == [(0, 1)]
    assert interface_pairs(pos, mask, asym, 8.0) == []


def test_the_data_module_draws_complexes_by_cluster(tmp_path):
    """The dev complexes (2Q2K heterodimer, 3U8V homodimer, 721P): with a cluster file putting the
    homodimer's two chains in one cluster, the draw frequency of each complex over 3,000 draws is its
    probability within 4 standard deviations, and the start-up line names the cluster file."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        examples, _ = load_complex_examples(REPO_DATA / "mmcif")
    names = [e.name for e in examples]
    chains = {e.name: [f"{e.name}_{c.chain_id}" for c in e.complex.chains] for e in examples}
    path = tmp_path / "clusters.txt"
    path.write_text(" ".join(chains["3u8v"]) + "\n")
    cfg = model_config("tiny_multimer", **{"data.crop_size": 16})
    draws = ComplexDraws(examples, cfg, 3, crop=MultimerCrop(16), clusters=read_cluster_file(path))
    p = draws.sampler.complex_probabilities(len(examples))
    homodimer = [it for it in draws.sampler.items if it.complex_index == names.index("3u8v")]
    assert {it.weight for it in homodimer if len(it.chains) == 1} == {0.75}  # 1.5 / 2: one cluster of two
    n = 3000
    picks = [draws.sampler.draw(np.random.default_rng([3, 7, k])).complex_index for k in range(n)]
    freq = np.bincount(picks, minlength=len(examples)) / n
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / n)), (freq, p)
    assert draws[11].sample_id == names[picks[11]]  # __getitem__ takes the same draw

    lines: list[str] = []
    dm = MultimerDataModule(REPO_DATA, cfg, TrainConfig(seed=3, held_out=()), log=lines.append, cluster_file=path)
    dm.setup()
    line = next(x for x in lines if x.startswith("sampling:"))
    assert f"clusters of {path}" in line and "interfaces in" in line


def test_train_hands_the_cluster_file_to_the_multimer_data(tmp_path, monkeypatch):
    """``alphafold-mem train --cluster-file`` (``DataOptions.cluster_file``) reaches the multimer data
    module (stopped before any step)."""
    seen = {}

    class Stop(Exception):
        pass

    def capture(*args, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(runner, "MultimerDataModule", capture)
    cfg = model_config("tiny_multimer", **{"data.crop_size": 16})
    with pytest.raises(Stop):
        runner.train(cfg, TrainConfig(), REPO_DATA, tmp_path, 1, data_options=DataOptions(cluster_file="c.txt"))
    assert seen["cluster_file"] == "c.txt"
