"""Scatter/Gather test fixtures: everything made is closed at the end.

Every test taking ``make`` runs on both wires: the PUSH/PULL emulation, and
libzmq's native SCATTER/GATHER when this pyzmq has the draft API (else that
run is skipped, saying so: ``.ci/draft`` builds such a pyzmq).
"""
import pytest

from zactors.patterns.scatter import Gather, Scatter, native_available

NO_DRAFT = "native SCATTER/GATHER needs pyzmq built with the draft API (run .ci/draft)"


@pytest.fixture(params=["emulated", "native"])
def wire(request):
    if request.param == "native" and not native_available():
        pytest.skip(NO_DRAFT)
    return request.param


@pytest.fixture
def make(wire):
    made = []

    class Maker:
        native = wire == "native"

        def scatter(self, **kw):
            kw.setdefault("native", self.native)
            made.append(Scatter(linger=0, **kw))
            return made[-1]

        def gather(self, **kw):
            kw.setdefault("native", self.native)
            made.append(Gather(**kw))
            return made[-1]

        def emulated_only(self, why):
            if self.native:
                pytest.skip("emulation only: " + why)

    yield Maker()
    for sock in made:
        sock.close()
