"""Integer data in the AMP rewrite: the functions that carry indices, which the rewrite keeps in
float32 whatever the lists say.

float16 holds every integer only up to 2048 (then every second one, every fourth from 4096, ...,
none from 65520 on: inf), so a token id 4097 moved by a half ``Slice`` reaches ``Embed`` as 4096
and the wrong row is read, silently. float32 holds every integer up to 2**24.

Integer data starts at the index inputs of the role table
(:func:`updater.driver.function_roles.input_roles`: Embed's ``x0``, OneHot's ``x``, the
cross-entropies' ``target``, Gather's ``indices``, ...) and travels:

- backwards, to the function that produces it: that function is kept in float32, and when it is
  a layout function (:data:`updater.amp.lists.LAYOUT`) what it moves (its value inputs) is
  integer data too;
- forwards, from any integer data into the layout functions that move it: they are kept in
  float32 and their outputs are integer data.

A function that makes an index from other values (``F.max(..., only_index=True)``, ``F.round``,
arithmetic) is kept in float32 itself; its inputs are not followed (they need not be integers).
"""

from __future__ import annotations

from typing import Dict, List

import nnabla as nn

from ..driver.function_roles import INDEX, VALUE, input_roles
from .lists import LAYOUT


def integer_functions(funcs) -> List[bool]:
    """True for each function of ``funcs`` (in the order of :func:`updater.amp.functions`) whose
    outputs carry integer data, by the two rules of this module."""
    producer = {o: i for i, f in enumerate(funcs) for o in f.outputs}  # unlinked copies too
    roles = [input_roles(f) for f in funcs]
    moved = [
        [v for v, role in zip(f.inputs, r) if role == VALUE] if f.info.type_name in LAYOUT else []
        for f, r in zip(funcs, roles)
    ]
    movers: Dict[nn.Variable, List[int]] = {}
    for j, inputs in enumerate(moved):
        for v in inputs:
            movers.setdefault(v, []).append(j)
    indices = [v for f, r in zip(funcs, roles) for v, role in zip(f.inputs, r) if role == INDEX]
    todo = [(v, True) for v in indices]  # (integer data, follow it backwards too)
    seen = {True: set(indices), False: set(indices)}
    exact = set()

    def push(variables, backwards: bool):
        for v in variables:
            if v not in seen[backwards]:
                seen[backwards].add(v)
                seen[False].add(v)
                todo.append((v, backwards))

    while todo:
        v, backwards = todo.pop()
        i = producer.get(v) if backwards else None
        if i is not None:
            exact.add(i)
            push(moved[i], True)
        for j in movers.get(v, ()):
            exact.add(j)
            push(funcs[j].outputs, False)
    return [i in exact for i in range(len(funcs))]
