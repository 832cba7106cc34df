"""Scatter/Gather test fixtures: everything made is closed at the end."""
import pytest

from zactors.patterns.scatter import Gather, Scatter


@pytest.fixture
def make():
    made = []

    class Maker:
        def scatter(self, **kw):
            made.append(Scatter(linger=0, **kw))
            return made[-1]

        def gather(self, **kw):
            made.append(Gather(**kw))
            return made[-1]

    yield Maker()
    for sock in made:
        sock.close()
