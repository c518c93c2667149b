"""benchmarks/bench_long_run.py reads a run from outside: the steps of a metrics.csv that grows
and is rewritten under it, and the cost per tenth of the epoch from its readings."""

from __future__ import annotations

import pytest
from bench_long_run import Attempt, MetricsTail, Reading, per_tenth

HEADER = "epoch,step,train/loss\n"


def test_the_tail_reads_only_new_rows_and_again_after_a_rewrite(tmp_path):
    path = tmp_path / "metrics.csv"
    tail = MetricsTail(path)
    assert tail.last_step() is None  # not written yet

    path.write_text(HEADER + "0,1,0.7\n0,2,0.6\n0,3,")  # the last row half-written
    assert tail.last_step() == 2
    with path.open("a") as file:
        file.write("0.5\n0,4,0.4\n")
    assert tail.last_step() == 4  # the half row completed, and one more
    assert tail.last_step() is None  # nothing new

    # a column added (validation's) rewrites the file whole, shorter or longer
    path.write_text("epoch,step,train/loss,val/accuracy\n0,4,0.4,\n0,5,,0.8\n")
    assert tail.last_step() == 5
    with path.open("a") as file:
        file.write(",,,\n1,6,0.3,\n")  # a row without a step is no step
    assert tail.last_step() == 6


def test_cost_per_tenth_leaves_out_the_gap_between_two_processes():
    first = Attempt([Reading(10.0, 5.0, 10, 100.0), Reading(11.0, 5.5, 30, 120.0)])
    # the second process starts at step 30 (its start-up is no step's time) and runs to 100
    second = Attempt(
        [
            Reading(20.0, 9.0, 40, 90.0),
            Reading(22.0, 10.0, 60, 95.0),
            Reading(25.0, 11.0, 100, 99.0),
        ]
    )
    assert per_tenth([first, second], 100) == {  # tenths with readings only
        3: pytest.approx((0.05, 0.025, 120.0)),
        6: pytest.approx((0.1, 0.05, 95.0)),
        9: pytest.approx((0.075, 0.025, 99.0)),  # step 100 ends the epoch: its last tenth
    }


@pytest.mark.parametrize("steps", [0, 1])
def test_an_attempt_that_trained_nothing_has_no_first_step(steps):
    attempt = Attempt([Reading(3.0, 2.0, 7, 50.0)] * steps)
    assert (attempt.first_step() is None) == (steps == 0)
