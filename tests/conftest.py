"""Shared test fixtures. TRITON_INTERPRET must be set before anything imports triton."""

import os

import torch

if not torch.cuda.is_available():  # CPU machines run the Triton kernels in Triton's interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pathlib  # noqa: E402

import pytest  # noqa: E402

TEST_DATA = pathlib.Path(__file__).parent / "data"
REPO_DATA = pathlib.Path(__file__).parent.parent / "data"


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield


@pytest.fixture
def tiny_config():
    from alphafold_mem import model_config
    return model_config("tiny")
