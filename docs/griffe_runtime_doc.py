"""A griffe extension for the API reference: the updater's docstring as Python has it.

``DynamicLossScalingUpdater``'s ``Args`` list its options from the options record
(``updater.driver.attributes.attach_options`` fills the ``{options}`` line when the module is
imported), so the source's docstring holds a placeholder that griffe, reading the source, would
render as is."""

import inspect

import griffe

_RUNTIME = {"updater.driver.updater.DynamicLossScalingUpdater"}


class RuntimeDocstring(griffe.Extension):
    def on_class_instance(self, *, cls: griffe.Class, **kwargs) -> None:
        if cls.path in _RUNTIME and cls.docstring is not None:
            module, _, name = cls.path.rpartition(".")
            obj = getattr(__import__(module, fromlist=[name]), name)
            cls.docstring.value = inspect.cleandoc(obj.__doc__)
