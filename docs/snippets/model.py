import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np

from updater import DynamicLossScalingUpdater, get_context  # noqa: F401 (the pages use it)

nn.set_default_context(get_context())  # cudnn half with a GPU, else cpu half (logged at DEBUG)
x, t = nn.Variable((32, 64)), nn.Variable((32, 1))
h = F.relu(PF.affine(x, 32, name="fc1"))
loss = F.mean(F.softmax_cross_entropy(PF.affine(h, 10, name="fc2"), t))
solver = S.Momentum(0.01, 0.9)
solver.set_parameters(nn.get_parameters())
rng = np.random.default_rng(0)


def feed():  # called once per forward (per accumulation round)
    x.d = rng.standard_normal(x.shape)
    t.d = rng.integers(0, 10, t.shape)
