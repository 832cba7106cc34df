"""A fresh backup catches up with a primary holding 100,000 messages while 10,000 msg/s flow, and only then
can it win a vote (issue #23; the 1,000,000-message run is tests/soak/test_pair_catch_up.py)."""
import pytest

from ._catch_up import catch_up

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def test_a_backup_catches_up_with_100k_messages_under_load_and_only_then_wins_a_vote(processes, tmp_path):
    figures = catch_up(processes, tmp_path, 100000, 10000)
    assert figures["refused_vote"], "the backup was ready at once: nothing showed it cannot win before"
