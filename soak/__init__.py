"""The soaks: long runs that check zactors' promises end to end under faults and hostile peers.

``python -m soak.faults`` (issue #19) and ``python -m soak.hostile`` (issue #20), from the
repository root; each takes ``--duration`` and ``--seed`` and prints its figures.  Short passes
run in tests/soak/.  They are not benchmarks (benchmarks/ compares speed with the anchors): a
soak checks invariants and fails when one breaks.
"""
