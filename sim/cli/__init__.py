"""The ``dls`` command: parse, check before work, call the library, show progress."""
