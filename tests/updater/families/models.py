"""The image and vector families of the matrix: an MLP classifier, a residual conv net with
BatchNormalization, a segmentation net with ignored pixels, a VAE and a GAN (two losses).

Each builder takes ``type_config`` ("half" for the updater's runs, "float" for the float32
reference) and returns a :class:`~tests.updater.families.parts.Family`. Sizes are the smallest
that still exercise the family's point; each loss carries a weight (a sum over the batch, or a
constant factor as a summed loss would give) that makes the backward overflow float16 at the
scale 2**15 and fit a few halvings below, so every run starts with an overflow to back off from.
"""

from __future__ import annotations

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np

from .parts import Family, Part, batch_rng, normal, scope, scoped_parameters


def mlp(type_config: str = "half") -> Family:
    """6 inputs -> 8 tanh -> 4 classes, softmax cross-entropy summed over 8 examples; Momentum."""
    name, rng = "mlp", np.random.RandomState(11)
    with scope(name, type_config):
        x, t = nn.Variable((8, 6)), nn.Variable((8, 1))
        h = F.tanh(PF.affine(x, 8, w_init=normal(rng, 0.5), name="fc1"))
        y = PF.affine(h, 4, w_init=normal(rng, 0.5), name="fc2")
        loss = F.sum(F.softmax_cross_entropy(y, t)) * 2.0
        solver = S.Momentum(0.02, 0.9)
        params = scoped_parameters(name)
        solver.set_parameters(params)

    def feed(k):
        r = batch_rng(1, k)
        x.d, t.d = r.randn(8, 6), r.randint(0, 4, (8, 1))

    return Family(name, [Part("main", loss, solver, feed)], params)


def resnet(type_config: str = "half") -> Family:
    """Conv 3x3 -> BatchNormalization -> ReLU -> conv 3x3 -> BatchNormalization, added to the
    input's 1x1 projection, ReLU, average pooling, 3 classes; 4 images of 2x6x6; Momentum over
    the trainable parameters (the running statistics move in the forward pass)."""
    name, rng = "resnet", np.random.RandomState(12)
    with scope(name, type_config):
        x, t = nn.Variable((4, 2, 6, 6)), nn.Variable((4, 1))
        skip = PF.convolution(x, 3, (1, 1), w_init=normal(rng, 0.5), name="proj")
        h = PF.convolution(x, 3, (3, 3), pad=(1, 1), w_init=normal(rng, 0.3), name="conv1")
        h = F.relu(PF.batch_normalization(h, batch_stat=True, name="bn1"))
        h = PF.convolution(h, 3, (3, 3), pad=(1, 1), w_init=normal(rng, 0.3), name="conv2")
        h = F.relu(PF.batch_normalization(h, batch_stat=True, name="bn2") + skip)
        y = PF.affine(F.average_pooling(h, (6, 6)), 3, w_init=normal(rng, 0.5), name="fc")
        loss = F.mean(F.softmax_cross_entropy(y, t)) * 4.0
        solver = S.Momentum(0.02, 0.9)
        params = scoped_parameters(name)
        solver.set_parameters({k: v for k, v in params.items() if v.need_grad})

    def feed(k):
        r = batch_rng(2, k)
        x.d, t.d = r.randn(4, 2, 6, 6), r.randint(0, 3, (4, 1))

    return Family(name, [Part("main", loss, solver, feed)], params)


def segmentation(type_config: str = "half") -> Family:
    """Conv 3x3 (4 maps) -> ReLU -> conv 1x1 to 3 classes per pixel of 2 images of 1x6x6;
    softmax cross-entropy along axis 1 with the label -1 ("ignore") on a one-pixel border and
    on a random tenth of the pixels; the mean over pixels; Adam."""
    name, rng = "segmentation", np.random.RandomState(13)
    with scope(name, type_config):
        x, t = nn.Variable((2, 1, 6, 6)), nn.Variable((2, 1, 6, 6))
        h = PF.convolution(x, 4, (3, 3), pad=(1, 1), w_init=normal(rng, 0.5), name="conv1")
        y = PF.convolution(F.relu(h), 3, (1, 1), w_init=normal(rng, 0.5), name="conv2")
        loss = F.mean(F.softmax_cross_entropy(y, t, axis=1)) * 4.0
        solver = S.Adam(0.01)
        params = scoped_parameters(name)
        solver.set_parameters(params)

    def feed(k):
        r = batch_rng(3, k)
        x.d = r.randn(2, 1, 6, 6)
        labels = (x.d > 0).astype(int) + (x.d > 1)  # a class per pixel the conv can learn
        labels[r.rand(*labels.shape) < 0.1] = -1
        labels[..., [0, -1], :] = labels[..., :, [0, -1]] = -1
        t.d = labels

    return Family(name, [Part("main", loss, solver, feed)], params)


def vae(type_config: str = "half") -> Family:
    """8 pixels in [0, 1] -> 6 tanh -> mean and log-variance of a 2-d code; the code drawn as
    ``mu + exp(logvar / 2) * eps`` with ``eps`` fed with the batch (so a resumed run draws the
    same noise) -> 6 tanh -> 8 logits; sigmoid cross-entropy plus the KL term, summed over 8
    examples; Adam."""
    name, rng = "vae", np.random.RandomState(14)
    with scope(name, type_config):
        x, eps = nn.Variable((8, 8)), nn.Variable((8, 2))
        h = F.tanh(PF.affine(x, 6, w_init=normal(rng, 0.5), name="enc"))
        mu = PF.affine(h, 2, w_init=normal(rng, 0.5), name="mu")
        logvar = PF.affine(h, 2, w_init=normal(rng, 0.1), name="logvar")
        z = mu + F.exp(logvar * 0.5) * eps
        d = F.tanh(PF.affine(z, 6, w_init=normal(rng, 0.5), name="dec"))
        logits = PF.affine(d, 8, w_init=normal(rng, 0.5), name="out")
        recon = F.sum(F.sigmoid_cross_entropy(logits, x))
        kl = F.sum(F.exp(logvar) + mu**2 - logvar - 1.0) * 0.5
        loss = (recon + kl) * 0.25
        solver = S.Adam(0.01)
        params = scoped_parameters(name)
        solver.set_parameters(params)
    patterns = np.random.RandomState(4).rand(3, 8)

    def feed(k):
        r = batch_rng(4, k)
        x.d = np.clip(patterns[r.randint(0, 3, 8)] + r.randn(8, 8) * 0.05, 0.0, 1.0)
        eps.d = r.randn(8, 2)

    return Family(name, [Part("main", loss, solver, feed)], params)


def gan(type_config: str = "half") -> Family:
    """As ``examples/gan_digits.py``, tiny: G maps 4-d noise -> 8 ReLU -> 8 sigmoid pixels, D
    maps 8 pixels -> 6 leaky ReLU -> 1 logit; D's loss sees the fake images cut from G's graph
    (its feed draws the noise and runs G's forward), G's loss goes through D; each loss
    summed over 8 examples (G's times 4), with Adam (beta1 0.5) over its own parameters.
    Real images: three fixed 8-pixel patterns plus noise."""
    name, rng = "gan", np.random.RandomState(15)
    with scope(name, type_config):
        z, x_real = nn.Variable((8, 4)), nn.Variable((8, 8))
        fake = _generator(z, rng)
        pred_fake = _discriminator(fake, rng)
        loss_g = F.sum(F.sigmoid_cross_entropy(pred_fake, F.constant(1.0, pred_fake.shape)))
        fake_cut = fake.get_unlinked_variable(need_grad=False)
        pred_real, pred_cut = _discriminator(x_real), _discriminator(fake_cut)
        ones, zeros = F.constant(1.0, pred_real.shape), F.constant(0.0, pred_cut.shape)
        loss_d = F.sum(F.sigmoid_cross_entropy(pred_real, ones)) + F.sum(
            F.sigmoid_cross_entropy(pred_cut, zeros)
        )
        params = scoped_parameters(name)
        solver_g, solver_d = S.Adam(0.01, beta1=0.5), S.Adam(0.01, beta1=0.5)
        solver_g.set_parameters({k: v for k, v in params.items() if "/gen/" in k})
        solver_d.set_parameters({k: v for k, v in params.items() if "/dis/" in k})
        loss_g = loss_g * 4.0
    patterns = np.random.RandomState(5).rand(3, 8)

    def feed_d(k):
        r = batch_rng(5, k)
        x_real.d = np.clip(patterns[r.randint(0, 3, 8)] + r.randn(8, 8) * 0.05, 0.0, 1.0)
        z.d = r.randn(8, 4)
        fake.forward(clear_buffer=True)  # fills fake_cut, the same buffer

    def feed_g(k):
        z.d = batch_rng(6, k).randn(8, 4)

    parts = [Part("dis", loss_d, solver_d, feed_d), Part("gen", loss_g, solver_g, feed_g)]
    return Family(name, parts, params)


def _generator(z, rng):
    with nn.parameter_scope("gen"):
        h = F.relu(PF.affine(z, 8, w_init=normal(rng, 0.7), name="fc1"))
        return F.sigmoid(PF.affine(h, 8, w_init=normal(rng, 0.35), name="fc2"))


def _discriminator(x, rng=None):
    """D's parameters are created on the first call (``rng`` seeds them) and shared after."""
    init = (lambda std: normal(rng, std)) if rng is not None else (lambda std: None)
    with nn.parameter_scope("dis"):
        h = F.leaky_relu(PF.affine(x, 6, w_init=init(0.5), name="fc1"), 0.2)
        return PF.affine(h, 1, w_init=init(0.4), name="fc2")
