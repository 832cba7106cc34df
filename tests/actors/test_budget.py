"""Budget: a shared allowance with a cap per holder; waiters served in order as holders give back."""
import pytest

from zactors.actors.budget import Budget


def test_requests_are_granted_up_to_the_total_and_the_rest_waits_in_order():
    b = Budget(100, per_holder=60)
    assert b.request("a", 60) == 60
    assert b.request("b", 30) == 30
    assert b.request("c", 20) == 10          # 10 left: the rest waits
    assert b.request("d", 5) == 0            # behind c
    assert (b.used, b.waiting, b.deferred) == (100, 2, 2)
    assert b.release("a", 15) == [("c", 10), ("d", 5)]
    assert (b.used, b.waiting) == (100, 0)
    assert b.held("c") == 20 and b.held("d") == 5


def test_a_holder_never_holds_nor_waits_for_more_than_its_cap():
    b = Budget(1000, per_holder=100)
    assert b.request("a", 80) == 80
    assert b.request("a", 50) == 20          # at its cap: 30 wait for its own release
    assert b.wanted("a") == 30
    assert b.request("a", 500) == 0          # its wait is capped too: the excess is dropped
    assert b.wanted("a") == 100 and b.dropped == 430
    assert b.release("a", 40) == [("a", 40)]
    assert b.held("a") == 100 and b.wanted("a") == 60


def test_a_waiter_at_its_own_cap_does_not_block_the_next():
    b = Budget(100, per_holder=50)
    b.request("a", 50)
    b.request("b", 50)
    b.request("a", 10)                        # waits on its own cap
    b.request("c", 10)                        # waits on the total
    assert b.release("b", 10) == [("c", 10)]
    assert b.wanted("a") == 10


def test_forget_gives_everything_back_and_cancels_the_wait():
    b = Budget(10)
    b.request("a", 10)
    b.request("b", 4)
    b.request("a", 3)
    assert b.forget("a") == [("b", 4)]
    assert b.used == 4 and b.wanted("a") == 0 and b.holders() == ["b"]
    assert b.cancel("b") == 0
    assert b.release("b", 99) == [] and b.used == 0   # never more than it holds


def test_nonsense_is_refused():
    with pytest.raises(ValueError):
        Budget(0)
    with pytest.raises(ValueError):
        Budget(10, per_holder=0)


def test_revoke_puts_an_unused_holding_back_in_line_behind_the_waiters():
    b = Budget(10)
    b.request("idle", 10)
    b.request("w", 4)
    assert b.revoke("idle", 10) == [("w", 4), ("idle", 6)]
    assert b.held("idle") == 6 and b.wanted("idle") == 4


def test_what_comes_back_goes_to_each_waiter_up_to_its_fair_share_first():
    b = Budget(90, per_holder=90)
    b.request("greedy", 90)
    b.request("greedy2", 90)                  # waits for all of it
    b.request("small", 10)                    # waits behind it
    assert b.fair_share == 30                 # three parties
    assert b.release("greedy", 40) == [("greedy2", 30), ("small", 10)]
    assert b.held("greedy2") == 30 and b.wanted("greedy2") == 60 and b.held("small") == 10


def test_only_what_a_holder_holds_beyond_its_fair_share_is_excess():
    b = Budget(100)
    b.request("reader", 20)
    b.request("hog", 80)
    b.request("late", 50)                     # three parties: a share of 33
    assert (b.excess("reader"), b.excess("hog"), b.excess("late")) == (0, 47, 0)
    assert b.revoke("hog", b.excess("hog")) == [("late", 47)]   # its share, then first come first served
    assert (b.held("hog"), b.wanted("hog"), b.held("reader")) == (33, 47, 20)   # the reader never touched


def test_parties_are_counted_once_whatever_they_do():
    b = Budget(10)
    b.request("a", 20)                        # holds and waits: one party
    b.request("b", 5)
    assert b.fair_share == 5
    b.forget("a")
    assert b.fair_share == 10 and b.held("b") == 5
    b.cancel("b")
    b.release("b", 5)
    assert b.fair_share == 10 and b.holders() == []


def test_waiters_are_served_a_fair_share_first_then_what_is_left():
    b = Budget(100)
    b.request("a", 100)
    b.request("b", 100)
    b.request("c", 100)
    assert b.fair_share == 33
    assert b.revoke("a", 60) == [("b", 33), ("c", 27)]   # a keeps 40, over its share: b and c first
    assert b.release("a", 40) == [("c", 6), ("a", 33), ("b", 1)]   # shares first, then the rest in turn
    assert b.used == 100 and (b.held("a"), b.held("b"), b.held("c")) == (33, 34, 33)


def test_charge_books_units_whatever_is_free_and_waiters_wait_until_it_is_back_under():
    b = Budget(10, per_holder=8)
    assert b.request("a", 8) == 8
    assert b.request("w", 4) == 2  # 2 wait
    b.charge("c", 6)               # units held elsewhere come back under this budget
    assert b.used == 16 and b.held("c") == 6 and b.fair_share == 3
    assert b.release("a", 4) == []  # still over the total: nothing to grant
    assert b.release("c", 6) == [("w", 2)]
    assert b.used == 8 and b.held("w") == 4
    b.charge("a", 0)
    assert b.forget("a") == [] and b.forget("w") == [] and b.used == 0 and b._parties == 0
