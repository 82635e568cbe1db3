"""What the policy tests share: a policy with asymmetric settings, running one over a sequence
of flags, a state as a tuple, and Hypothesis strategies of policies and steps."""

from hypothesis import strategies as st

from updater.policy import DynamicScale, HeadroomScale, NnablaLegacy, StaticScale

ASYM = dict(
    init_scale=64.0,
    growth_factor=2.0,
    backoff_factor=0.25,
    growth_interval=3,
    min_scale=1.0,
    max_scale=2.0**12,
    hysteresis=2,
)


def run(policy, flags, absmax=None):
    """Advance one run over a sequence of flags; return the list of states after each step."""
    state = policy.init()
    out = []
    for i, ok in enumerate(flags):
        state = policy.update(state, ok, None if absmax is None else absmax[i])
        out.append(state)
    return out


def as_tuple(state):
    return (float(state.scale), int(state.good_steps), int(state.hysteresis_left))


powers = st.integers(-10, 15).map(lambda k: 2.0**k)


@st.composite
def policies(draw):
    kind = draw(st.sampled_from(["static", "dynamic", "legacy", "headroom"]))
    if kind == "static":
        return StaticScale(draw(powers))
    if kind == "legacy":
        return NnablaLegacy(
            draw(powers), draw(st.sampled_from([2.0, 4.0, 1.5])), draw(st.integers(1, 5))
        )
    lo, hi = sorted([draw(st.integers(-10, 15)), draw(st.integers(-10, 15))])
    init = 2.0 ** draw(st.integers(lo, hi))
    if kind == "headroom":
        return HeadroomScale(
            init_scale=init,
            margin=draw(st.sampled_from([1.0, 2.0, 4.0])),
            backoff_factor=2.0 ** -draw(st.integers(1, 8)),
            min_scale=2.0**lo,
            max_scale=2.0**hi,
        )
    return DynamicScale(
        init_scale=init,
        growth_factor=draw(st.sampled_from([2.0, 4.0, 1.5])),
        backoff_factor=draw(st.sampled_from([0.5, 0.25, 0.7])),
        growth_interval=draw(st.integers(1, 6)),
        min_scale=2.0**lo,
        max_scale=2.0**hi,
        hysteresis=draw(st.integers(1, 3)),
        consecutive_hysteresis=draw(st.booleans()),
    )


steps = st.lists(st.tuples(st.booleans(), st.floats(0, 65504, width=16)), max_size=40)
