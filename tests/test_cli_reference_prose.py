"""The CLI reference keeps a command's example block as lines of a code block (not joined into one
paragraph) and its prose as paragraphs."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import cli_reference  # noqa: E402


def test_examples_stay_lines_and_prose_stays_paragraphs():
    text = "tool: does a thing.\n\nExamples:\n\n    tool --a 1   # one\n    tool --b \\\n        --c\n"
    text += "\nThe rest\nof it.\n"
    assert cli_reference.prose(text) == [
        "tool: does a thing.",
        "",
        "Examples:",
        "",
        "```text",
        "tool --a 1   # one",
        "tool --b \\",
        "    --c",
        "```",
        "",
        "The rest of it.",
        "",
    ]


def test_the_train_page_shows_its_examples_line_by_line():
    page = cli_reference.render()
    section = page.split("## alphafold-mem train\n", 1)[1].split("\n## ", 1)[0]
    assert "```text\nalphafold-mem train --data data/ " in section
    assert "\n    --precision bf16 --max-steps 100000 --out runs/af2\n" in section
