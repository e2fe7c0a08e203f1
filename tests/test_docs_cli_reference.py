"""The command-line reference (docs/reference/cli.md, rendered from the parsers at build time by
scripts/cli_reference.py) lists every option of every subcommand with its help, default and choices.

The check walks the real parsers (``alphafold_mem.cli.main.build_parser``) on its own and reads the
rendered Markdown back; the last tests show it fails when an option, its help, a default or a
subcommand is missing."""

from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path

import pytest

from alphafold_mem.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import cli_reference  # noqa: E402

SKIPPED = (argparse._HelpAction, argparse._SubParsersAction, argparse._VersionAction)


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(``"alphafold-mem a b"``, parser) for every subcommand, nested ones included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield " ".join(("alphafold-mem",) + path + (name,)), sub
                yield from commands(sub, path + (name,))


def sections(markdown: str) -> dict[str, list[list[str]]]:
    """Heading ``## alphafold-mem ...`` -> the table rows below it, as lists of plain-text cells."""
    found: dict[str, list[list[str]]] = {}
    current = None
    for line in markdown.splitlines():
        if line.startswith("## "):
            current = found.setdefault(line[3:].strip(), [])
        elif current is not None and line.startswith("| ") and not line.startswith("| option |"):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            current.append([html.unescape(re.sub(r"\\(.)", r"\1", c)).replace("`", "").strip() for c in cells])
    return found


def _plain(text: str) -> str:
    return " ".join(text.split())


def missing(parser: argparse.ArgumentParser, markdown: str) -> list[str]:
    """What the page lacks: a subcommand, an option (every flag spelling), its help, default or a choice."""
    page = sections(markdown)
    problems = []
    for name, sub in commands(parser):
        if name not in page:
            problems.append(f"{name}: no section")
            continue
        rows = page[name]
        for action in sub._actions:
            if isinstance(action, SKIPPED) or action.help == argparse.SUPPRESS:
                continue
            spellings = action.option_strings or [action.dest]
            row = next(
                (r for r in rows if all(re.search(rf"(^|[\s,]){re.escape(s)}\b", r[0]) for s in spellings)), None
            )
            label = f"{name} {'/'.join(spellings)}"
            if row is None:
                problems.append(f"{label}: not listed")
                continue
            if action.help:
                expected = _plain(sub.formatter_class(prog=sub.prog)._expand_help(action))
                if expected not in _plain(row[1]):
                    problems.append(f"{label}: help not shown")
            flag = isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))
            default = action.default
            if isinstance(default, (list, tuple)):
                default = " ".join(str(v) for v in default) or None
            if default not in (None, argparse.SUPPRESS) and not flag and not action.required:
                shown = default
                if str(shown) not in row[2]:
                    problems.append(f"{label}: default {action.default!r} not shown")
            for choice in action.choices or ():
                if str(choice) not in row[3]:
                    problems.append(f"{label}: choice {choice!r} not shown")
    return problems


@pytest.fixture(scope="module")
def parser():
    return build_parser()


@pytest.fixture(scope="module")
def page(parser):
    return cli_reference.render(parser)


def test_reference_lists_every_option_of_every_subcommand(parser, page):
    names = [n for n, _ in commands(parser)]
    assert {"alphafold-mem predict", "alphafold-mem train", "alphafold-mem memory-plan"} <= set(names)
    assert "alphafold-mem weights fetch" in names  # nested subcommands are walked too
    options = sum(len([a for a in p._actions if not isinstance(a, SKIPPED)]) for _, p in commands(parser))
    assert options > 100
    assert missing(parser, page) == []


def test_default_render_is_the_cli_parser(page):
    assert cli_reference.render() == page


def test_check_fails_when_an_option_row_is_missing(parser, page):
    lines = page.splitlines()
    out_row = next(i for i, line in enumerate(lines) if line.startswith("| `--out DIR, -o DIR`"))
    del lines[out_row]
    assert missing(parser, "\n".join(lines)) == ["alphafold-mem predict --out/-o: not listed"]


def test_check_fails_when_the_parser_has_an_option_the_page_lacks(page):
    parser = build_parser()
    sub = dict(commands(parser))["alphafold-mem memory-plan"]
    sub.add_argument("--new-option", choices=("a", "b"), default="a", help="an option added after rendering")
    assert missing(parser, page) == ["alphafold-mem memory-plan --new-option: not listed"]


def test_check_fails_on_a_wrong_help_default_or_choice(parser, page):
    lines = page.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("| `--seed SEED`"))
    lines[i] = "| `--seed SEED` | something else | `7` |  |"
    assert missing(parser, "\n".join(lines)) == [
        "alphafold-mem predict --seed: help not shown",
        "alphafold-mem predict --seed: default 0 not shown",
    ]
    j = next(i for i, line in enumerate(lines) if line.startswith("| `--precision {fp32,bf16,bf16-full}`"))
    lines[j] = re.sub(r", `bf16-full`", "", lines[j])
    assert "alphafold-mem predict --precision: choice 'bf16-full' not shown" in missing(parser, "\n".join(lines))


def test_check_fails_when_a_subcommand_is_missing(parser, page):
    cut = page.split("## alphafold-mem weights fetch")[0]
    assert missing(parser, cut) == ["alphafold-mem weights fetch: no section"]
