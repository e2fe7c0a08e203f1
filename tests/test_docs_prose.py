"""Documentation prose holds no dates, no times of day in UTC and no commit hashes: README.md, the
pages under docs/ (but the generated ones: docs/benchmarks/, written by `make benchmarks`, and
docs/ablation/, written by `alphafold-mem ablate`, and docs/memory-budget.md, written by
scripts/memory_budget_page.py, whose headers carry their run's date and revision)
and the docstrings of alphafold_mem/ and kernels/ (read with ast). The story of how a figure came
about lives in git history and in the generated pages, not in prose.

Found: an ISO date (2024-05-01, with or without a time), a written-out date or month and year
("March 2025", "3 March 2025", "Mar. 3, 2025"), a time of day marked UTC/GMT/Z or ISO's ``T12:00``,
a commit hash (7 to 40 lowercase hex digits mixing digits and letters, or any 7+ hex word that names
a commit of this repository).

Allowed, one narrow rule: a date given as the value of ``--max-template-date`` / ``max_template_date``
(the template cut-off is an input, e.g. AF2's ``--max-template-date 2021-10-10``).
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GENERATED = (
    "docs/benchmarks",
    "docs/ablation",
    "docs/memory-budget.md",
)  # memory-budget: scripts/memory_budget_page.py
DOCSTRING_ROOTS = ("alphafold_mem", "kernels")

_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December"
    "|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
)
_YEAR = r"(?:19|20)\d\d"
PATTERNS = {
    "date": re.compile(rf"\b{_YEAR}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])(?!\d)"),
    "written date": re.compile(
        rf"\b(?:{_MONTHS})\.?\s+(?:\d{{1,2}}(?:st|nd|rd|th)?,?\s+)?{_YEAR}\b"
        rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:{_MONTHS})\.?,?\s+{_YEAR}\b"
    ),
    "time of day": re.compile(
        r"\b(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d)?(?:\.\d+)?\s*(?:UTC|GMT|Z\b|[+-]00:?00)"
        r"|(?<=\d)T(?:[01]\d|2[0-3]):[0-5]\d"
    ),
    "commit hash": re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
}
HEX_WORD = re.compile(r"\b[0-9a-f]{7,40}\b")
# the one allowed date: the value of the template cut-off option
ALLOWED_DATE = re.compile(r"(?:--max-template-date[ =]|max_template_date\s*[=:]\s*[\"']?)$")


def commits_among(words: set[str]) -> set[str]:
    """The words that name a commit of this repository (empty without git or outside a clone)."""
    if not words:
        return set()
    ordered = sorted(words)
    try:
        out = subprocess.run(
            ["git", "cat-file", "--batch-check"],
            input="".join(f"{w}^{{commit}}\n" for w in ordered),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return set()
    if out.returncode != 0:
        return set()
    answers = out.stdout.splitlines()
    return {w for w, a in zip(ordered, answers) if a.endswith(" commit") or " commit " in a}


def findings(text: str, repo_commits: bool = True) -> list[tuple[int, str, str]]:
    """``(line, kind, match)`` for every date, UTC time or commit hash in ``text`` (1-based lines)."""
    found = []
    for kind, pattern in PATTERNS.items():
        for m in pattern.finditer(text):
            if kind == "date" and ALLOWED_DATE.search(text[max(0, m.start() - 40) : m.start()]):
                continue
            found.append((m.start(), kind, m.group(0)))
    if repo_commits:
        flagged = {s for s, k, _ in found if k == "commit hash"}
        words = {m.group(0): m.start() for m in HEX_WORD.finditer(text) if m.start() not in flagged}
        for word in commits_among(set(words)):
            found.append((words[word], "commit hash", word))
    return sorted((text.count("\n", 0, start) + 1, kind, match) for start, kind, match in found)


def prose_files() -> list[Path]:
    files = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    return [f for f in files if f.exists() and not f.relative_to(ROOT).as_posix().startswith(GENERATED)]


def docstrings(path: Path):
    """``(first line, text)`` of every module, class and function docstring of ``path``."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    yield first.lineno, first.value.value


def test_prose_pages_hold_no_dates_times_or_hashes():
    files = prose_files()
    assert ROOT / "README.md" in files and len(files) >= 2
    hits = [
        f"{f.relative_to(ROOT)}:{line}: {kind} {match!r}"
        for f in files
        for line, kind, match in findings(f.read_text())
    ]
    assert not hits, "dates, times and commit hashes belong in generated pages and git history:\n" + "\n".join(hits)


def test_docstrings_hold_no_dates_times_or_hashes():
    sources = [p for root in DOCSTRING_ROOTS for p in sorted((ROOT / root).rglob("*.py"))]
    assert len(sources) > 50
    hits = [
        f"{p.relative_to(ROOT)}:{first + line - 1}: {kind} {match!r}"
        for p in sources
        for first, text in docstrings(p)
        for line, kind, match in findings(text)
    ]
    assert not hits, "docstrings state the contract, not when or in which commit:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    "text, kind",
    [
        ("Measured on 2026-12-01 on a loaded machine.", "date"),
        ("Run 2026-12-01T03:55:58+00:00 (UTC).", "date"),
        ("the kernels were compiled in March 2025", "written date"),
        ("as of 3 March 2025, the table", "written date"),
        ("updated Dec. 1, 2026 after the fix", "written date"),
        ("the run started at 14:05 UTC", "time of day"),
        ("at 09:14:00Z the job began", "time of day"),
        ("since commit 86882e2 the counter", "commit hash"),
        ("see a49b736f0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f", "commit hash"),
    ],
)
def test_bad_text_is_found(text, kind):
    assert kind in [k for _, k, _ in findings(text, repo_commits=False)]


def test_a_commit_of_this_repository_is_found_whatever_its_digits():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if not head:
        pytest.skip("not a git clone")  # CI runs in a clone; an unpacked sdist has no history
    assert commits_among({head[:10], "1234567", "deadbee"}) <= {head[:10]}
    assert commits_among({head[:10]}) == {head[:10]}
    assert (1, "commit hash", head[:12]) in findings(f"fixed in {head[:12]}.")


@pytest.mark.parametrize(
    "text",
    [
        "alphafold-mem search target.fasta --template-db pdb_seqres.txt --max-template-date 2021-10-10",
        "PipelineOptions(max_template_date='2021-10-10')",
        "bf16 and fp32 weights; model_1_ptm; N_res 10,000; 0x7fffffff; sha256 "
        "de79f79190f6bdf7de79f79190f6bdf7de79f79190f6bdf7de79f79190f6bdf7",
        "a 1:1 ratio, line 12:5, May hold 2 entries, the 2020s",
    ],
)
def test_allowed_text_passes(text):
    assert findings(text, repo_commits=False) == []


def test_the_allowed_date_is_only_the_template_cut_off():
    assert [k for _, k, _ in findings("templates released 2021-10-10 or later", repo_commits=False)] == ["date"]
