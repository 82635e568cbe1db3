"""A griffe extension for the API reference: the docstrings' Sphinx roles as links.

The docstrings name other objects as ``help()`` readers and Sphinx write them,
``:func:`simulate```, ``:class:`updater.Trace```, ``:meth:`update```; mkdocstrings renders Markdown
and would show the role as typed. Each role becomes an optional mkdocs-autorefs reference: a link
where the object is on a page of the site, else the name as code (no warning). A name is resolved
as Python would from the docstring's place (its function, class, module and their imports), so
``:meth:`update``` in a method's docstring names its class's ``update``; then, for this project's
packages, to where the object is defined (``updater.Trace`` is ``updater.trace.format.Trace``,
where the reference documents it), by importing it as the build does anyway.
"""

import importlib
import inspect
import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:meth|class|func|data|attr|mod|exc|obj|const):`(~?)([\w.]+)`")
"""A Sphinx cross-reference role (``~`` shows the last part of the name only)."""
ROOTS = ("updater", "sim")


def in_scope(obj: griffe.Object, name: str) -> str:
    """The full name ``name`` stands for in ``obj``'s docstring, or ``name`` itself."""
    first, _, rest = name.partition(".")
    if first in ROOTS:
        return name
    try:
        found = obj.resolve(first)
    except (griffe.NameResolutionError, griffe.AliasResolutionError):
        return name
    return f"{found}.{rest}" if rest else found


def defined_at(name: str) -> str:
    """Where the object of this project named ``name`` is defined (``module.qualname``), or
    ``name`` itself (not this project's, not found, or an object without a qualified name)."""
    parts = name.split(".")
    if parts[0] not in ROOTS:
        return name
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                found = getattr(found, part)
        except AttributeError:
            return name
        if inspect.ismodule(found):
            return found.__name__
        module, qualname = getattr(found, "__module__", None), getattr(found, "__qualname__", None)
        return f"{module}.{qualname}" if isinstance(module, str) and qualname else name
    return name


def link(obj: griffe.Object, match: re.Match) -> str:
    short, name = match.groups()
    title = name.rsplit(".", 1)[-1] if short else name
    target = defined_at(in_scope(obj, name))
    return f'<autoref identifier="{target}" optional><code>{title}</code></autoref>'


class CrossReferences(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None and not obj.is_alias:
            obj.docstring.value = ROLE.sub(lambda m: link(obj, m), obj.docstring.value)
