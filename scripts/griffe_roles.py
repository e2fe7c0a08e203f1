"""Griffe extension for the API reference (mkdocs.yml, mkdocstrings ``extensions:``): the docstrings'
reStructuredText roles shown as Markdown code.

The docstrings cross-reference with Sphinx roles (``:func:`plan```, ``:class:`~.policy.MemoryPolicy```);
Markdown has no roles, so each becomes an inline code span of the name as written, without the role,
the leading ``~`` and the relative dots (`` `plan` ``, `` `MemoryPolicy` ``). ``::`` at the end of a
paragraph (reStructuredText's literal-block marker) becomes ``:``, the indented block after it being a
Markdown code block already.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const|ref|term)?:`([^`]+)`")
LITERAL_MARKER = re.compile(r"(\S)::\n")


def _name(target: str) -> str:
    """The name a role shows: ``~a.b.C`` -> ``C``, ``.a.b`` -> ``a.b``, ``text <target>`` -> ``text``."""
    target = target.strip()
    if target.endswith(">") and "<" in target:
        return target[: target.index("<")].strip()
    if target.startswith("~"):
        return target[1:].rsplit(".", 1)[-1]
    return target.lstrip(".")


def markdown_docstring(text: str) -> str:
    """``text`` with reStructuredText roles as code spans and ``::`` markers as ``:``."""
    text = ROLE.sub(lambda m: f"`{_name(m.group(1))}`", text)
    return LITERAL_MARKER.sub(r"\1:\n", text)


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring griffe loads (:func:`markdown_docstring`)."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        """The top-level package itself (``on_object`` sees its members only)."""
        self.on_object(obj=pkg)
