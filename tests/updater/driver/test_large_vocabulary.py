"""Issue 37, item 1: class ids and embedding indices >= 65520 are indices, not float16 values.
A model with a 65600-entry embedding and a 65600-class output (tiny otherwise) trains in
cpu:half on every finite_check path, with its ids in float32 or int64, and backs off when its
scale is too high (before, every step was a bad batch: "input 1 of SoftmaxCrossEntropy"); an id
outside its table is bad data, named with the table's size."""

import itertools

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale, NonFiniteGradientsError

pytestmark = pytest.mark.nnabla
VOCABULARY = 65600
SCOPES = itertools.count()


class Vocabulary:
    """ids -> Embed(65600, 2) -> Affine(65600) -> SoftmaxCrossEntropy (times 100, so that its
    gradients overflow at 2**15), in cpu:half; the ids and the labels near the top of the table."""

    def __init__(self, dtype):
        rng = np.random.RandomState(0)
        with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"vocab{next(SCOPES)}"):
            self.ids, self.labels = nn.Variable((4, 1)), nn.Variable((4, 1))
            h = PF.embed(self.ids, VOCABULARY, 2, initializer=I.NormalInitializer(1.0, rng))
            y = PF.affine(h, VOCABULARY, w_init=I.NormalInitializer(0.5, rng))
            self.loss = F.mean(F.softmax_cross_entropy(y, self.labels)) * 100.0
            self.solver = S.Sgd(0.02)
            self.solver.set_parameters(nn.get_parameters())
        top = np.array([[VOCABULARY - 1], [VOCABULARY - 2], [65520], [3]])
        self.ids.d, self.labels.d = top.astype(dtype), top[::-1].astype(dtype)

    def plain_loss(self):
        self.loss.forward()
        return float(self.loss.d)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("check", ["numpy", "solver", "nnabla", "auto"])
def test_a_65600_word_model_trains_and_backs_off_from_a_scale_too_high(check, dtype):
    m = Vocabulary(dtype)
    first = m.plain_loss()
    policy = DynamicScale(init_scale=2.0**15, growth_interval=1000)
    u = DynamicLossScalingUpdater(m.solver, m.loss, policy=policy, finite_check=check)
    records = [u.update() for _ in range(12)]
    overflowed = [r for r in records if not r.update_applied]
    assert overflowed and not any(r.bad_batch for r in records)  # an overflow, not bad data
    assert overflowed[0].new_scale < overflowed[0].scale  # backed off
    assert sum(r.update_applied for r in records) >= 4
    assert m.plain_loss() < first  # it learned the batch


@pytest.mark.parametrize("check", ["numpy", "solver"])
def test_an_id_outside_its_table_is_bad_data_named_with_the_tables_size(check):
    m = Vocabulary(np.int64)
    m.ids.d = np.array([[1], [2], [VOCABULARY], [3]])  # one past the end of the embedding
    policy = DynamicScale(init_scale=2.0**15)
    u = DynamicLossScalingUpdater(
        m.solver, m.loss, policy=policy, finite_check=check, max_consecutive_nonfinite=1
    )
    with pytest.raises(NonFiniteGradientsError) as info:
        u.update()
    assert "so this is bad data" in str(info.value)
    [name] = info.value.input_names
    assert name.startswith("input 0 of Embed") and f"an index in [0, {VOCABULARY})" in name
