"""node.import_gc: the collector stays off inside the block, what exists after it is frozen, its state comes back."""

from __future__ import annotations

import gc

import pytest

from node.import_gc import collector_off_while_importing


@pytest.fixture
def collector_restored():
    was_on = gc.isenabled()
    yield
    gc.unfreeze()
    gc.enable() if was_on else gc.disable()


@pytest.mark.parametrize("on_before", [True, False])
def test_the_block_runs_without_the_collector_and_what_it_made_is_frozen(collector_restored, on_before):
    gc.enable() if on_before else gc.disable()
    gc.unfreeze()
    with collector_off_while_importing():
        assert not gc.isenabled()
        made = [[i] for i in range(1000)]  # containers the collector tracks, as an import makes
    assert gc.isenabled() is on_before
    assert gc.get_freeze_count() >= len(made)
    scanned = {id(o) for o in gc.get_objects()}  # the generations a collection walks, not the permanent one
    assert all(gc.is_tracked(d) and id(d) not in scanned for d in made)


def test_the_collector_state_comes_back_when_the_block_raises(collector_restored):
    gc.enable()
    with pytest.raises(ImportError), collector_off_while_importing():
        raise ImportError("a missing module")
    assert gc.isenabled()
