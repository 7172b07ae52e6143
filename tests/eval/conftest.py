import pytest


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models on a shared 2-core machine run fastest on one thread (more mostly wait on each other)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
