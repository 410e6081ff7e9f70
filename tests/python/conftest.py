"""pytest fixtures for the Python binding's tests: psd clusters that are
stopped, and checked to have exited cleanly, after every test."""

from __future__ import annotations

from typing import Callable, List

import pytest

from psdcluster import Cluster

# Tables of the cluster most tests use. `sum` makes every push visible
# exactly, zeros make the expected values easy to state.
TABLES = """
[table.emb]
kind = sparse
dim = 4
updater = sum
init = zeros

[table.dense]
kind = dense
rows = 100
dim = 3
updater = sum
init = zeros

[table.seeded]
kind = sparse
dim = 2
init = uniform 1 2
seed = 7
"""


@pytest.fixture
def make_cluster() -> Callable[..., Cluster]:
    """Starts clusters on demand: make_cluster(tables=..., nodes=2,
    shards=4, cluster_lines="workers = 2\\n"). Each is stopped after the
    test, which fails if a node did not exit with status 0."""
    made: List[Cluster] = []

    def make(tables: str = TABLES, **kw) -> Cluster:
        c = Cluster(tables, **kw)
        made.append(c)
        return c

    yield make
    problems = []
    for c in made:
        problems += c.close()
    assert not problems, "\n".join(problems)


@pytest.fixture
def cluster(make_cluster) -> Cluster:
    """A 2-node cluster with the TABLES above."""
    return make_cluster()
