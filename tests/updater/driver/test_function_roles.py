"""Issue 37, the table: every function the installed nnabla registers is classified by
updater.driver.function_roles, whose hand-written part names real inputs and arguments of the
registry; the roles resolved on real graphs (FusedConvolution's statistics, indices and their
tables)."""

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import pytest

from tests.nnabla_models import cpu_context
from updater.driver import function_roles as roles
from updater.driver.value_ranges import input_ranges

pytestmark = pytest.mark.nnabla

MODE_ARGUMENTS = ("batch_stat", "update_running_mean", "test", "x_min_max", "training")
"""Arguments that switch a function between a training and an inference behaviour."""
MODES_WITHOUT_STATE = {"RNN", "LSTM", "GRU"}  # ``training``: their dropout only


def test_every_function_the_installed_nnabla_registers_is_classified():
    registered = set(roles.registry())
    assert len(registered) >= 200  # the registry was read, not an empty file
    assert sorted(registered - roles.REVIEWED) == []


def test_every_function_with_a_training_mode_argument_writes_state_or_is_known_not_to():
    for name, entry in roles.registry().items():
        modes = [a for a in entry.get("arguments", {}) if a in MODE_ARGUMENTS]
        if modes:
            assert name in roles.STATE or name in MODES_WITHOUT_STATE, (name, modes)
    assert "FusedConvolution" in roles.STATE


def test_the_hand_written_part_names_inputs_and_arguments_of_the_registry():
    registry = roles.registry()
    for name, writes in roles.STATE.items():
        inputs, arguments = registry[name]["inputs"], registry[name].get("arguments", {})
        assert set(writes.written) <= set(inputs), name
        assert {a for a, _, _ in writes.when} <= set(arguments), name
    for name, row in roles.INDEXES.items():
        inputs, arguments = registry[name]["inputs"], registry[name].get("arguments", {})
        axis, table = row.axis, row.table
        assert row.index in inputs and (table in inputs or axis is None and table in arguments)
        assert axis is None or isinstance(axis, int) or axis in arguments, name
        assert (axis is None) == (row.along is not None) or table in inputs, name
    for name, when in roles.HANDS_ON.items():
        assert {a for a, _, _ in when} <= set(registry[name].get("arguments", {})), name
    indexed = [n for e in registry.values() for n in e["inputs"] if n.lower() in roles.INDEX_NAMES]
    assert len(indexed) >= 5  # Gather, GatherNd, ScatterNd, ScatterAdd, PackPaddedSequence, ...


def test_random_functions_are_read_from_the_registry():
    assert roles.draws_random("Dropout") and roles.draws_random("RandomChoice")
    assert not roles.draws_random("Affine") and not roles.draws_random("PythonFunction")


def _functions(loss):
    found = []
    loss.visit(found.append)
    return {f.info.type_name: f for f in found}


@pytest.mark.parametrize("batch_stat", [True, False])
def test_fused_convolutions_running_statistics_are_forward_state_when_batch_stat(batch_stat):
    with nn.context_scope(cpu_context("half")):
        x = nn.Variable((2, 3, 4, 4))
        stats = [nn.Variable((1, 3, 1, 1)) for _ in range(4)]  # beta, gamma, mean, variance
        w = nn.Variable((3, 3, 3, 3))
        for z in (None, nn.Variable((2, 3, 4, 4))):
            y = F.fused_convolution(x, w, None, *stats, z, pad=(1, 1), batch_stat=batch_stat)
            found = roles.input_roles(_functions(F.sum(y))["FusedConvolution"])
            state = roles.FORWARD_STATE if batch_stat else roles.VALUE
            assert found[4:6] == [state, state]
            assert found[:4] + found[6:] == [roles.VALUE] * (len(found) - 2)
            written = roles.state_inputs(F.sum(y))
            expected = {hash(stats[2]), hash(stats[3])} if batch_stat else set()
            assert {hash(v) for v in written} == expected
        biased = F.sum(F.fused_convolution(x, w, nn.Variable((3,)), pad=(1, 1)))
    assert roles.input_roles(_functions(biased)["FusedConvolution"]) == [roles.VALUE] * 3


def test_labels_and_embedding_ids_are_indices_bounded_by_their_tables():
    with nn.context_scope(cpu_context("half")), nn.parameter_scope("roles_vocab"):
        ids, labels = nn.Variable((4, 1)), nn.Variable((4, 1))
        x = nn.Variable((4, 2))
        h = PF.embed(ids, 70000, 2)
        y = PF.affine(F.concatenate(h.reshape((4, 2)), x, axis=1), 65600)
        loss = F.mean(F.softmax_cross_entropy(y, labels))
    functions = _functions(loss)
    assert roles.input_roles(functions["Embed"]) == [roles.INDEX, roles.VALUE]
    assert roles.input_roles(functions["SoftmaxCrossEntropy"]) == [roles.VALUE, roles.INDEX]
    id_range, label_range, x_range = input_ranges(loss, [ids, labels, x])
    assert id_range.holds(0) and id_range.holds(69999) and not id_range.holds(70000)
    assert not id_range.holds(-1) and "70000" in id_range.why
    assert label_range.holds(65599) and not label_range.holds(65600)
    assert label_range.holds(-1) and label_range.holds(-(2**31)) and "ignores" in label_range.why
    assert x_range.holds(65504) and not x_range.holds(65520)  # a value read in half
    with nn.context_scope(cpu_context("float")):
        float_loss = F.mean(F.softmax_cross_entropy(x, labels)) + F.sum(x)
    label_range, x_range = input_ranges(float_loss, [labels, x])
    assert (label_range.low, label_range.high) == (-(2**31) - 1, 2)  # 2 classes, ignored < 0
    assert not x_range.bounded  # a value read in float32: any finite value
