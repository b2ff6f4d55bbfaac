"""The check that fusion and capture tests test the lowering, not its fallback.

A plan whose lowering raises replays its graph op by op (the replay executor, which
is also these tests' oracle), so a broken lowering would pass every comparison.
:func:`assert_plans_lowered` is an autouse fixture of ``tests/fusion`` and
``tests/capture`` (their conftest.py): it notes each plan a test runs and fails the
test if one of them fell back. A test that means to fall back says why with
``@pytest.mark.replays("why")``. (The suite also turns the fallback's
:class:`~ember.errors.FallbackWarning` into an error, see pyproject.toml; this check
holds where a test catches warnings itself.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ember.backend.fusion.plan import Plan


def fell_back(plans: list[Any]) -> list[Any]:
    """The plans of ``plans`` that replay because their lowering failed."""
    return [plan for plan in plans if plan.replay is not None]


@pytest.fixture(autouse=True)
def assert_plans_lowered(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fails the test if a plan it ran fell back to replay (unless marked ``replays``)."""
    if request.node.get_closest_marker("replays") is not None:
        yield
        return
    seen: dict[int, Any] = {}
    original = Plan.run  # every target's plans run through it

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.setdefault(id(self), self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Plan, "run", run)
    yield
    broken = fell_back(list(seen.values()))
    assert not broken, (
        f"{len(broken)} plan(s) fell back to replay: the lowering failed (mark the test 'replays' if meant)"
    )
