"""Held-out questions, refused in code by everything that fits, trains or calibrates.

The DPR test sets (``nq-test``, ``trivia-test``, ``wq-test``, ``squad-test``,
``curated-test``) and the FanOutQA questions outside the split file's ``train`` and ``dev``
lists are for acceptance runs only. Every fitting, training and calibration entry point
(``crag-bench evaluator train`` and ``calibrate``, ``bench/scripts/calibrate_thresholds.py``,
``scripts/fit_*_calibration.py``) passes the question ids it is about to use through
:func:`refuse_held_out`, which raises before anything is fitted.

``purpose="train"`` also refuses the ``measure`` questions of :mod:`crag_bench.pair_mining`
(the first half of the bundled dev sets, on which dev figures are taken): training on them
would make those figures in-sample.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from crag_bench.dpr_sets import DPR_SETS

Purpose = Literal["train", "calibrate", "fit"]

TEST_SETS: tuple[str, ...] = tuple(spec.name for spec in DPR_SETS if spec.name.endswith("-test"))
"""The DPR sets that are for acceptance runs only."""

_TEST_ID = re.compile(rf"^({'|'.join(re.escape(name) for name in TEST_SETS)})-\d+$")


class HeldOutError(ValueError):
    """Held-out questions were about to be used to train, fit or calibrate."""


def is_test_id(question_id: str) -> bool:
    """Whether ``question_id`` names a question of a DPR test set (``nq-test-12``)."""
    return _TEST_ID.match(question_id) is not None


def refuse_held_out(question_ids: Iterable[str], purpose: Purpose) -> None:
    """Raise if any id is a test-set or held-out FanOutQA question (or, to train, measured on).

    Raises:
        HeldOutError: The message names how many, one example and why.
    """
    from crag_bench.evaluator_report import read_split
    from crag_bench.fanoutqa import leaf_owners

    ids = list(dict.fromkeys(question_ids))
    tests = [i for i in ids if is_test_id(i)]
    if tests:
        raise HeldOutError(
            f"{len(tests)} question(s) come from a test set (e.g. {tests[0]!r}); test sets are "
            f"for acceptance runs only and may not be used to {purpose}"
        )
    split = read_split(None)
    allowed = set(split["train"]) | set(split["dev"])
    owners = leaf_owners()
    held = [i for i in ids if i in owners and not owners[i] <= allowed] + [
        i for i in ids if i not in owners and _is_fanoutqa_top(i) and i not in allowed
    ]
    if held:
        raise HeldOutError(
            f"{len(held)} question(s) are held-out FanOutQA questions (e.g. {held[0]!r}, in "
            f"neither train nor dev of the split file); they may not be used to {purpose}"
        )
    if purpose == "train":
        from crag_bench.pair_mining import measured_ids

        measured_set = measured_ids()
        measured = [i for i in ids if i in measured_set]
        if measured:
            raise HeldOutError(
                f"{len(measured)} question(s) are the measured half of the bundled dev sets "
                f"(e.g. {measured[0]!r}); dev figures are taken on them, so they may not be "
                "used to train"
            )


def _is_fanoutqa_top(question_id: str) -> bool:
    """FanOutQA top-level ids are 16 hex digits."""
    return re.fullmatch(r"[0-9a-f]{16}", question_id) is not None
