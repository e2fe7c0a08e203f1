"""The command-line reference (``docs/reference/cli.md``) rendered from the real argparse parsers.

The documentation build renders it (``scripts/docs_hooks.py``), so the page always matches the code;
``tests/test_docs_cli_reference.py`` checks that it lists every option of every subcommand.

To read the page without building the site::

    python scripts/cli_reference.py > /tmp/cli.md

Walks :func:`alphafold_mem.cli.main.build_parser` and every subparser below it (``weights fetch``
included). For each command: its description and epilog, its usage line, and one table per argument
group with each option's flags, help (``%(default)s`` expanded), default and choices. Options whose
help is ``argparse.SUPPRESS`` (internal) and ``-h/--help`` (on every command) are left out.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
import textwrap
from typing import Iterator

USAGE_WIDTH = 100  # the usage blocks are wrapped at this width whatever the terminal


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """The subparsers of ``parser``: name -> (parser, the help line its parent shows)."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found[name] = (sub, helps.get(name) or "")
    return found


def walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """Every command below ``parser`` (depth first, in registration order) as (path, parser, help line);
    the root itself is not yielded."""
    for name, (sub, help_line) in subcommands(parser).items():
        yield path + (name,), sub, help_line
        yield from walk(sub, path + (name,))


def documented_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The actions the reference lists: all but ``-h/--help``, suppressed ones and subcommand choosers."""
    return [
        a
        for a in parser._actions
        if a.help != argparse.SUPPRESS
        and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction, argparse._VersionAction))
    ]


def _text(value: str) -> str:
    """Plain text for a Markdown table cell: HTML and Markdown syntax escaped, one line."""
    value = html.escape(" ".join(str(value).split()), quote=False)
    return re.sub(r"([\\`*_\[\]|{}#])", r"\\\1", value)


def prose(text: str) -> list[str]:
    """A description or epilog as Markdown lines: blank-line separated paragraphs joined into one line
    each, and blocks whose lines are all indented (examples, as ``RawDescriptionHelpFormatter`` shows
    them) kept line by line in a text code block."""
    lines: list[str] = []
    for block in re.split(r"\n\s*\n", textwrap.dedent(str(text)).strip("\n")):
        rows = block.splitlines()
        if rows and all(r.startswith((" ", "\t")) for r in rows if r.strip()):
            lines += ["```text", *textwrap.dedent(block).splitlines(), "```", ""]
        elif block.strip():
            lines += [_text(block), ""]
    return lines


def _code(value: str) -> str:
    """``value`` as an inline code span (pipes escaped for tables)."""
    value = str(value).replace("|", "\\|")
    fence = "``" if "`" in value else "`"
    return f"{fence}{value}{fence}"


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    return parser.formatter_class(prog=parser.prog, width=USAGE_WIDTH)


def invocation(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """How the option is written: ``--out DIR, -o DIR`` / ``input`` (a positional by its name; its
    choices have their own column)."""
    if not action.option_strings:
        return action.metavar if isinstance(action.metavar, str) else action.dest
    return _formatter(parser)._format_action_invocation(action)


def help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The option's help with argparse's ``%(...)s`` fields filled in ("" when it has none)."""
    if not action.help:
        return ""
    return " ".join(_formatter(parser)._expand_help(action).split())


def default_text(action: argparse.Action) -> str | None:
    """The default shown in the reference, or None where there is nothing to show (no default, a flag's
    implicit False/True, a required option)."""
    if action.required or action.default is None or action.default == argparse.SUPPRESS:
        return None
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction)):
        return None
    if isinstance(action, argparse._CountAction) and action.default == 0:
        return None
    if isinstance(action.default, (list, tuple)):
        return " ".join(str(v) for v in action.default) or None
    return str(action.default)


def choices_text(action: argparse.Action) -> list[str]:
    """The allowed values, in order (empty when any value goes)."""
    return [str(c) for c in action.choices] if action.choices else []


def usage(parser: argparse.ArgumentParser) -> str:
    """The usage line(s), wrapped at :data:`USAGE_WIDTH`."""
    fmt = _formatter(parser)
    fmt.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return fmt.format_help().strip()


def heading(path: tuple[str, ...]) -> str:
    return "alphafold-mem " + " ".join(path)


def _command(path: tuple[str, ...], parser: argparse.ArgumentParser, help_line: str) -> list[str]:
    lines = [f"## {heading(path)}", ""]
    for text in (parser.description or help_line, parser.epilog):
        if text:
            lines += prose(text)
    children = subcommands(parser)
    if children:
        lines += ["Subcommands: " + ", ".join(f"[`{heading(path + (n,))}`](#{_anchor(path + (n,))})" for n in children)]
        lines.append("")
    lines += ["```text", usage(parser), "```", ""]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a in documented_actions(parser)]
        if not actions:
            continue
        lines += [f"**{_text(group.title or 'options')}**", ""]
        if group.description:
            lines += [_text(group.description), ""]
        lines += ["| option | description | default | choices |", "|---|---|---|---|"]
        for a in actions:
            flags = _code(invocation(parser, a))
            default = default_text(a)
            cells = [
                flags + (" (required)" if a.required and a.option_strings else ""),
                _text(help_text(parser, a)),
                _code(default) if default is not None else "",
                ", ".join(_code(c) for c in choices_text(a)),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    exclusive = [g for g in parser._mutually_exclusive_groups if len(g._group_actions) > 1]
    for g in exclusive:
        names = ", ".join(_code(a.option_strings[0] if a.option_strings else a.dest) for a in g._group_actions)
        lines += [f"At most one of {names}" + (" (one is required)." if g.required else "."), ""]
    return lines


def _anchor(path: tuple[str, ...]) -> str:
    """The id Python-Markdown's toc gives the command's heading."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading(path).lower())).strip("-")


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole reference page (Markdown) for ``parser`` (default: the ``alphafold-mem`` parser)."""
    if parser is None:
        from alphafold_mem.cli.main import build_parser  # the package is imported only when rendering

        parser = build_parser()
    commands = list(walk(parser))
    lines = [
        "# Command-line reference",
        "",
        "Generated from the argparse parsers of `alphafold-mem` (`scripts/cli_reference.py`) each time the site is "
        "built, so it matches the installed code. Every command also takes `-h` / `--help`; "
        "`alphafold-mem --version` prints the version.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    lines += [f"| [`{heading(path)}`](#{_anchor(path)}) | {_text(h)} |" for path, _, h in commands]
    lines.append("")
    for path, sub, help_line in commands:
        lines += _command(path, sub, help_line)
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
