"""The OpenFold side-by-side driver's cell arithmetic (alphafold_mem.ablation.openfold)."""

from alphafold_mem.ablation.openfold import ALLOCATORS, median_cell


def test_median_cell_takes_median_of_numbers_and_keeps_labels():
    runs = [{"seconds": 3.0, "rss_bytes": 10, "malloc": "applied: x"},
            {"seconds": 1.0, "rss_bytes": 30, "malloc": "applied: x"}]
    cell = median_cell(runs)
    assert cell == {"seconds": 2.0, "rss_bytes": 20, "malloc": "applied: x"}
    assert median_cell(runs + [{"error": "boom"}]) == {"error": "boom"}


def test_allocator_environments():
    assert ALLOCATORS["default"] == {}
    assert ALLOCATORS["glibc"] == {"ALPHAFOLD_MEM_MALLOC": "default"}
    assert ALLOCATORS["release"] == {"ALPHAFOLD_MEM_MALLOC": "release"}
    assert ALLOCATORS["mmap"]["MALLOC_MMAP_THRESHOLD_"] == "65536"
