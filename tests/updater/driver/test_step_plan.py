"""The plan of an iteration (issue 51): made once per configuration, again when an option is
assigned (the loss, which is the graph, included), never by a plain ``update()``; the iteration
then runs as the new options say, and the bookkeeping the plan leaves out is what cannot act."""

import pytest

from tests.nnabla_models import TinyBNClassifier, TinyClassifier
from updater import DynamicLossScalingUpdater
from updater.driver.attempts import StepPlan

pytestmark = pytest.mark.nnabla


def test_a_plain_update_does_not_plan_again():
    m = TinyClassifier("plan_plain")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(weights={2: 1e4}))
    plan = u._plan
    assert plan == StepPlan(watch_outside=False, retry=False, clip=False)
    records = [u.update() for _ in range(4)]
    u.backward()
    u.step()
    assert not records[2].update_applied  # an overflow, skipped: still the same plan
    assert u._plan is plan


def test_assigning_an_option_plans_again_and_the_next_update_follows_it():
    """``on_overflow="retry"`` retries the spike; back to "skip", the next spike is skipped."""
    m = TinyClassifier("plan_retry", seed=3)
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(weights={1: 1e4, 3: 1e4}), scale=64.0)
    assert u.update().attempts == 1
    u.on_overflow = "retry"
    assert u._plan.retry and not u._plan.watch_outside
    retried = u.update()
    assert retried.attempts > 1 and retried.update_applied
    u.update()
    u.on_overflow = "skip"
    skipped = u.update()
    assert skipped.attempts == 1 and not skipped.update_applied
    u.clip_grad_norm = 0.5
    assert u._plan == StepPlan(watch_outside=False, retry=False, clip=True)


def test_the_outside_forward_watch_follows_an_assigned_feeder_both_ways():
    """Without a data feeder a forward of the user's own between steps is refused; assigning a
    feeder stops the watch after the next step (such a forward is then taken as meant),
    removing it starts it again."""
    m = TinyBNClassifier("plan_watch")
    feed = m.feeder()
    u = DynamicLossScalingUpdater(m.solver, m.loss)
    assert u._plan.watch_outside
    feed()
    u.update()
    u.data_feeder = feed
    assert not u._plan.watch_outside
    u.update()  # checks what the last step without a feeder left watched, watches nothing
    m.loss.forward()
    u.update()  # not refused: the watch stopped with the feeder
    u.data_feeder = None
    feed()
    u.update()
    feed()
    m.loss.forward()
    with pytest.raises(RuntimeError, match="ran outside the updater"):
        u.update()


def test_assigning_the_loss_plans_and_watches_the_new_graph():
    m, other = TinyClassifier("plan_loss"), TinyBNClassifier("plan_loss_bn")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder())
    u.update()
    plan = u._plan
    u.data_feeder, u.loss, u.solver = None, other.loss, other.solver
    assert u._plan is not plan and u._plan.watch_outside
    feed = other.feeder()
    feed()
    u.update()
    feed()
    other.loss.forward()
    with pytest.raises(RuntimeError, match="ran outside the updater"):
        u.update()
