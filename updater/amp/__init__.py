"""nnabla: automatic mixed precision, a graph rewrite choosing float16 or float32 per function
(:mod:`updater.amp.rewrite`) by lists of function types (:mod:`updater.amp.lists`)."""

from .lists import CLASSES, AmpLists, amp_contexts, default_lists, describe_lists, function_names
from .rewrite import functions, half_share, multiply_adds, paint, precision_table, rewrite

__all__ = [
    "AmpLists",
    "CLASSES",
    "amp_contexts",
    "default_lists",
    "describe_lists",
    "function_names",
    "functions",
    "half_share",
    "multiply_adds",
    "paint",
    "precision_table",
    "rewrite",
]
