"""All gradient arrays seen as one flat float32 vector on their own device: one
``F.concatenate`` over flat views of them (``NdArray.view``: same memory, no copy until the
function runs). The device path (:class:`DeviceStats`) and the "numpy" path's many-array layout
check this one vector, so their nnabla work per update is a fixed number of functions whatever
the number of arrays; :func:`device_functions` counts the functions run.

A graph is built once per set of arrays (compared by ``hash``, nnabla's pointer to the array, so
a parameter added to the solver or a gradient array replaced makes a new one) and per set of
quantities asked. Reading a gradient through a function leaves one that is still lazily zero
since ``solver.zero_grad()`` lazily zero, so nnabla's solvers still skip its parameter.

Why this on a GPU (from nnabla-ext-cuda's source; no GPU ran here): ``check_inf_or_nan_grad``
runs a ``thrust::transform_reduce`` per parameter array and returns its result to the host,
so one kernel and one device-to-host synchronisation per array (about 200 for a BERT-base);
``scale_grad`` launches one kernel per array without waiting. ``F.concatenate`` launches one
copy kernel per input without waiting, and the checks of the flat vector are a fixed handful of
kernels and one host read: one synchronisation per update instead of one per array. The price
is memory: the concatenation holds a float32 copy of every gradient while the check runs (100
MB for 25 million parameters). On a CPU the copy is the cost (see ``reports/benchmarks.md``).
"""

from __future__ import annotations

import itertools
from typing import List, NamedTuple

import nnabla as nn
import numpy as np

from .arrays import array_dtype, copy_array, host_view, restore_array

TINY = 2.0**-126
"""Floor of the divisor in the sum of squares (float32's smallest normal)."""

_FUNCTIONS = 0


def device_functions() -> int:
    """How many nnabla functions the flat graphs have run in this process (a counter for tests
    and benchmarks, as :func:`updater.driver.arrays.host_reads`: take the difference around the code
    measured)."""
    return _FUNCTIONS


def float_context(context):
    """The "float" type config of ``context``'s backend and device (the graphs run in float32
    whatever the gradients' dtype)."""
    from nnabla.ext_utils import get_extension_context

    return get_extension_context(
        context.backend[0].split(":")[0], device_id=context.device_id, type_config="float"
    )


class _Graph(NamedTuple):
    arrays: tuple  # hashes of the arrays the inputs view, and the group sizes
    present: tuple  # per group of arrays: whether any is non-empty
    inputs: List[nn.Variable]  # the extra inputs ``build`` made
    output: nn.Variable
    functions: int


def _flat(views: List[nn.Variable]):
    import nnabla.functions as F

    return F.concatenate(*views, axis=0) if len(views) > 1 else F.identity(views[0])


class FlatGraphs:
    """Graphs over flat views of arrays, one per kind, rebuilt when the arrays change.

    Args:
        context (nnabla Context): where the arrays live (e.g. the loss function's).
    """

    def __init__(self, context):
        self.context = float_context(context)
        self._graphs: dict = {}

    def graph(self, kind, groups, build) -> _Graph:
        """Graph ``kind`` over ``groups`` of arrays (lists of NdArray): the one built before if
        the arrays are the same, else ``build(views) -> (extra inputs, output)`` with ``views``
        the flat views of each group's non-empty arrays (a list per group)."""
        key = (tuple(map(hash, itertools.chain(*groups))), tuple(map(len, groups)))
        graph = self._graphs.get(kind)
        if graph is None or graph.arrays != key:
            with nn.context_scope(self.context):
                views = [[_view(a) for a in group if a.size] for group in groups]
                extra, output = build(views)
            count = [0]
            if output is not None:
                output.visit(lambda f: count.__setitem__(0, count[0] + 1))
            present = tuple(bool(v) for v in views)
            graph = self._graphs[kind] = _Graph(
                arrays=key, present=present, inputs=extra, output=output, functions=count[0]
            )
        return graph

    @staticmethod
    def forward(graph: _Graph) -> nn.NdArray:
        """Run ``graph`` (counted by :func:`device_functions`); its output's array."""
        global _FUNCTIONS
        _FUNCTIONS += graph.functions
        graph.output.forward(clear_buffer=True)
        return graph.output.data

    def concatenated(self, arrays, kind="flat") -> nn.NdArray | None:
        """The values of the non-empty ``arrays`` one after the other, as float32, in one
        array on their device (a host array for the "numpy" path); None if all are empty. The
        array is graph ``kind``'s output: overwritten by the next call with that ``kind``."""

        def build(views):
            return [], (_flat(views[0]) if views[0] else None)

        graph = self.graph(kind, [arrays], build)
        return self.forward(graph) if graph.present[0] else None

    def save(self, variables, slot="saved") -> SavedData:
        """A copy of the data of ``variables`` (list of Variable) on their device, bit for bit
        in their own dtypes: the float16 and float32 ones in one float32 concatenation into
        ``slot``'s own array (exact for float16), which the next save into the same ``slot``
        overwrites; any other dtype (int64, float64, ...) in a copy of its own."""
        if not variables:
            return SavedData(variables=[], copy=None, dtypes=[], context=self.context, own={})
        arrays = [v.data for v in variables]
        dtypes = [array_dtype(a) for a in arrays]
        flat = [a for a, d in zip(arrays, dtypes) if d in _IN_FLOAT32]
        own = {
            i: copy_array(a) for i, (a, d) in enumerate(zip(arrays, dtypes)) if d not in _IN_FLOAT32
        }
        return SavedData(
            variables=variables,
            copy=self.concatenated(flat, slot),
            dtypes=dtypes,
            context=self.context,
            own=own,
        )


_IN_FLOAT32 = (np.dtype(np.float16), np.dtype(np.float32))


class SavedData(NamedTuple):
    """What :meth:`FlatGraphs.save` copied: the variables, the float16/float32 data one after
    the other in float32, their dtypes, the context to cast in, and the copies of the others
    (by position)."""

    variables: list
    copy: nn.NdArray | None
    dtypes: list
    context: object
    own: dict

    def pieces(self) -> list:
        """The saved data of each variable, in order: its own copy, a view of its values in the
        float32 concatenation, or None for an empty one."""
        pieces, offset = [], 0
        for i, v in enumerate(self.variables):
            if i in self.own:
                pieces.append(self.own[i])
            elif v.size:
                assert self.copy is not None  # a non-empty float16/float32 array is in it
                pieces.append(self.copy.narrow(0, offset, v.size).view(v.shape))
                offset += v.size
            else:
                pieces.append(None)
        return pieces

    def restore(self) -> None:
        """Write the data back, each array in the dtype it had when saved (a float16 statistic
        stays float16; the values are the saved ones, bit for bit)."""
        for i, (v, dtype, piece) in enumerate(zip(self.variables, self.dtypes, self.pieces())):
            if i in self.own:
                restore_array(v, piece)
            elif piece is not None:
                v.data.copy_from(piece, use_current_context=False)
                if array_dtype(v.data) != dtype:
                    v.data.cast(dtype, self.context)


def loss_context(loss):
    """The context of the function that computes ``loss`` (the current one for a leaf)."""
    return loss.parent.context if loss.parent is not None else nn.get_current_context()


def _view(array) -> nn.Variable:
    """A Variable whose data is a flat view of ``array`` (same memory)."""
    v = nn.Variable((array.size,))
    v.data = array.view((array.size,))
    return v


class DeviceReading(NamedTuple):
    """One :meth:`DeviceStats.read`: whether every gradient is finite; the largest |value| over
    the gradients (or over ``absmax_over`` when given; None when not asked); the sum of squares
    of the gradients times ``factor`` (None when not asked); whether the loss is inf/NaN (False
    without a loss); whether an input holds inf/NaN (False without inputs); whether a running
    statistic does (False without statistics)."""

    finite: bool
    absmax: float | None
    sumsq: float | None
    loss_bad: bool
    inputs_bad: bool = False
    statistics_bad: bool = False


class DeviceStats(FlatGraphs):
    """The device path's check: one graph over the flat gradients and one host read of its
    small result per :meth:`read`.

    It computes ``sum(g * 0)`` over the flat vector (0 when every value is finite, NaN
    otherwise: exact), and as asked the largest |value| and the sum of squares of
    ``u = g * factor`` (the values ``solver.scale_grad(factor)`` will leave, bit for bit) as
    ``m**2 * sum((u / m)**2)`` with ``m`` the largest |u| (at least 2**-126), so that no square
    overflows; ``loss * 0`` (NaN for an inf/NaN loss); ``sum(x * 0)`` over the graph's
    inputs (the data of the batch) and over the running statistics; and for each ``(low,
    high)`` of the bounded inputs (:func:`updater.driver.value_ranges.input_ranges`) the largest
    ``|x|`` over them (``low == -high``), bad from ``high`` on, or their largest and smallest
    value, bad from ``high`` up and ``low`` down (float32, compared with the bounds in Python:
    exact for float16 and float32 inputs and for integers below 2**24 in magnitude); an input
    bounded entry by entry (OneHot's columns, GatherNd's rows) alone, by :func:`_entry_parts`.
    """

    def __init__(self, context):
        super().__init__(context)
        self._bounds: dict = {}  # kind -> (what, bound) of each range check, in output order

    def read(
        self,
        grads,
        absmax_over=None,
        sumsq_factor=None,
        loss=None,
        inputs=(),
        statistics=(),
        ranged=(),
    ) -> DeviceReading:
        """Run the graph on ``grads`` (list of NdArray), ``absmax_over`` (None: no largest
        |value| asked; a list of NdArray: over them, the gradients' own when empty), ``loss``
        (Variable or None), ``inputs`` and ``statistics`` (lists of NdArray) and ``ranged``
        (``(NdArray, *Range.bounds)`` of the bounded inputs), with the sum of squares of the
        gradients times ``sumsq_factor`` (float; None: not asked); one host read."""
        asked = _Asked(
            own_top=absmax_over is not None and not absmax_over,
            sumsq=sumsq_factor is not None,
            loss=loss is not None,
            bounds=tuple(r[1:] for r in ranged),
        )
        kind = ("stats", *asked)
        groups = (
            grads,
            absmax_over or [],
            [] if loss is None else [loss.data],
            inputs,
            statistics,
            [r[0] for r in ranged],
        )
        graph = self.graph(kind, groups, lambda views: self._build(kind, asked, ranged, views))
        if asked.sumsq:
            graph.inputs[0].d = sumsq_factor
        values = iter(host_view(self.forward(graph)).tolist())
        reading = self._reading(graph.present, values, asked, self._bounds[kind])
        if absmax_over is None:
            reading = reading._replace(absmax=None)
        return reading if asked.sumsq else reading._replace(sumsq=None)

    def _build(self, kind, asked: _Asked, ranged, views) -> tuple:
        """The graph of :meth:`read` on the flat ``views`` of its groups of arrays (``ranged``:
        its bounded inputs): ``([the factor's input], the outputs one after the other)``; the
        range checks' ``(what, bound)`` kept for ``kind``, in output order."""
        import nnabla.functions as F

        grad_views, over_views, loss_views, input_views, statistic_views, ranged_views = views
        factor_var = nn.Variable((1,))
        factor_var.d = 1.0
        parts = _gradient_parts(grad_views, factor_var, asked) if grad_views else []
        if over_views:
            parts.append(F.max(F.abs(_flat(over_views))))
        if loss_views:  # 0 for a finite loss, NaN for inf/NaN
            parts.append(F.mul_scalar(loss_views[0], 0.0))
        for checked in (input_views, statistic_views):
            if checked:
                parts.append(F.sum(F.mul_scalar(_flat(checked), 0.0)))
        bounds = [r[1:] for r in ranged if r[0].size]  # aligned with ranged_views
        checks = self._bounds[kind] = []
        for low, high in sorted({b for b in bounds if len(b) == 2}):  # each group's extremes
            group = [v for v, b in zip(ranged_views, bounds) if b == (low, high)]
            x = group[0] if len(group) == 1 else _flat(group)
            for what, bound, part in _range_parts(x, low, high):
                parts.append(part)
                checks.append((what, bound))
        shapes = [r[0].shape for r in ranged if r[0].size]
        for x, b, shape in zip(ranged_views, bounds, shapes):  # bounds entry by entry
            for what, bound, part in _entry_parts(x, shape, *b[2:]) if len(b) > 2 else ():
                parts.append(part)
                checks.append((what, bound))
        if not parts:  # nothing to check: a graph still needs an output
            parts.append(F.mul_scalar(factor_var, 0.0))
        return [factor_var], _flat([F.reshape(p, (1,)) for p in parts])

    @staticmethod
    def _reading(present, values, asked: _Asked, checks) -> DeviceReading:
        """The :class:`DeviceReading` of the ``values`` the graph output, in the order
        :meth:`_build` put them (``present``: which groups of arrays it had; ``checks``: the
        range checks' ``(what, bound)``)."""
        finite, absmax, sumsq = True, 0.0, 0.0
        if present[0]:
            finite = next(values) == 0.0
            absmax = next(values) if asked.own_top else absmax
            if asked.sumsq:
                sumsq = max(next(values), TINY) ** 2 * next(values)
        if present[1]:
            absmax = next(values)
        loss_bad = present[2] and next(values) != 0.0
        inputs_bad = present[3] and next(values) != 0.0
        statistics_bad = present[4] and next(values) != 0.0
        for what, bound in checks:  # the range checks, as built
            value = next(values)
            inputs_bad = not (value > bound if what == "min" else value < bound) or inputs_bad
        return DeviceReading(
            finite=finite,
            absmax=absmax,
            sumsq=sumsq,
            loss_bad=loss_bad,
            inputs_bad=inputs_bad,
            statistics_bad=statistics_bad,
        )


class _Asked(NamedTuple):
    """What one :meth:`DeviceStats.read` computes besides the finite flags (part of the key of
    its graph): the gradients' own largest |value|, their sum of squares, the loss's check, the
    ``(low, high)`` of each bounded input."""

    own_top: bool
    sumsq: bool
    loss: bool
    bounds: tuple


def _gradient_parts(grad_views, factor_var, asked: _Asked) -> list:
    """The outputs over the flat gradients: ``sum(g * 0)``, their largest |value| when asked,
    and the largest |u| and ``sum((u / m)**2)`` of ``u = g * factor`` when asked."""
    import nnabla.functions as F

    g = _flat(grad_views)
    parts = [F.sum(F.mul_scalar(g, 0.0))]
    if asked.own_top:
        parts.append(F.max(F.abs(g)))
    if asked.sumsq:
        u = F.mul2(g, factor_var)
        top = F.reshape(F.max(F.abs(u)), (1,))
        floor = F.maximum_scalar(top, TINY)
        parts += [top, F.sum(F.pow_scalar(F.div2(u, floor), 2.0))]
    return parts


def _entry_parts(x: nn.Variable, shape, entries, along: int) -> list:
    """``(what, bound, output)`` of the checks of the flat ``x`` (an array of ``shape``) whose
    entry ``j`` along axis ``along`` lies in ``entries[j] = (low_j, high_j)``: the largest
    ``x - high_j`` ("max", bad from 0 up) and the smallest ``x - low_j`` ("min", bad from 0
    down), exact in float32 for integers below 2**24 and for values near their bounds."""
    import nnabla.functions as F

    x = F.reshape(x, shape)
    if along:
        x = F.transpose(x, [along, *(a for a in range(len(shape)) if a != along)])
    x = F.reshape(x, (len(entries), -1))
    lows, highs = (
        nn.Variable.from_numpy_array(np.array([[e[k]] for e in entries], dtype=np.float32))
        for k in (0, 1)
    )
    return [("max", 0.0, F.max(F.sub2(x, highs))), ("min", 0.0, F.min(F.sub2(x, lows)))]


def _range_parts(x: nn.Variable, low: float, high: float) -> list:
    """``(what, bound, output)`` of the checks of ``x`` against ``(low, high)``: its largest
    |value| ("abs", bad from ``high`` on) for a bound on |x|, else its largest value ("max",
    bad from ``high`` up) and smallest ("min", bad from ``low`` down), for each finite bound."""
    import nnabla.functions as F

    if low == -high:
        return [("abs", high, F.max(F.abs(x)))]
    found = [("max", high, F.max(x))] if high != float("inf") else []
    return found + ([("min", low, F.min(x))] if low != -float("inf") else [])
