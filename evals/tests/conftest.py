import pytest


@pytest.fixture
def tau_data():
    from evals.tau import tau_load

    return tau_load()
