"""A griffe extension for the API reference: the updater's docstring and signatures as Python
has them.

``DynamicLossScalingUpdater``'s ``Args`` list its options from the options record
(``updater.driver.attributes.attach_options`` fills the ``{options}`` line when the module is
imported), so the source's docstring holds a placeholder that griffe, reading the source, would
render as is; its typed signature writes ``DEFAULT`` for each option's default, which the same
function replaces with the record's. Its ``update()`` keeps a ``new_scale`` parameter only to
answer PyTorch's habit with a ``TypeError``; the signature ``help()`` shows (``__signature__``,
set when the module is imported by ``updater.driver.call_order.answer_habits``) has none, and
the reference shows that.
"""

import inspect

import griffe

_RUNTIME = {"updater.driver.updater.DynamicLossScalingUpdater"}


def _runtime(path: str):
    module, _, name = path.rpartition(".")
    return getattr(__import__(module, fromlist=[name]), name)


class RuntimeDocstring(griffe.Extension):
    def on_class_instance(self, *, cls: griffe.Class, **kwargs) -> None:
        if cls.path in _RUNTIME and cls.docstring is not None:
            cls.docstring.value = inspect.cleandoc(_runtime(cls.path).__doc__)

    def on_function_instance(self, *, func: griffe.Function, **kwargs) -> None:
        owner, _, name = func.path.rpartition(".")
        if owner in _RUNTIME and name == "__init__":
            runtime = inspect.signature(_runtime(owner)).parameters
            for parameter in func.parameters:
                if str(parameter.default) == "DEFAULT":
                    parameter.default = repr(runtime[parameter.name].default)

    def on_class(self, *, cls: griffe.Class, **kwargs) -> None:  # the class with its members
        if cls.path not in _RUNTIME:
            return
        for member in cls.members.values():
            shown = getattr(getattr(_runtime(cls.path), member.name, None), "__signature__", None)
            if member.is_function and shown is not None:
                kept = {"self", *shown.parameters}
                member.parameters = griffe.Parameters(
                    *(p for p in member.parameters if p.name in kept)
                )
