"""MkDocs hooks (``hooks:`` in mkdocs.yml): add the generated command-line reference to the site.

``reference/cli.md`` is rendered from the argparse parsers at build time
(:func:`cli_reference.render`); it is not a file in ``docs/``, so it cannot fall behind the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_reference import render  # noqa: E402
from mkdocs.exceptions import PluginError  # noqa: E402
from mkdocs.structure.files import File  # noqa: E402

CLI_PAGE = "reference/cli.md"


def on_files(files, config):
    """Add ``reference/cli.md``, rendered now; a file of that name under ``docs/`` is an error (it would
    hide the generated one)."""
    if files.get_file_from_path(CLI_PAGE) is not None:
        raise PluginError(
            f"docs/{CLI_PAGE} exists: it is generated at build time (scripts/cli_reference.py); delete it"
        )
    files.append(File.generated(config, CLI_PAGE, content=render()))
    return files
