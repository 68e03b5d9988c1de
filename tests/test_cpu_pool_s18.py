"""The CPU backend's large-buffer pool hands out only blocks nothing refers to (session 18: its search starts after
the size class's last hit instead of at the front): a decoder-like pattern (the caller holding the last step's
outputs while the next step's are taken) never gets a held block, reuses freed ones, and the values stay
intact."""
import numpy as np

from neetorch.devices import cpu as C


def _take(n):
    return C._pool_take(n)


def test_pool_never_hands_out_a_held_block():
    n = (1 << 18) + 1000                      # pooled size, its own class
    held = []
    for step in range(6):
        fresh = [_take(n) for _ in range(12)]
        for k, a in enumerate(fresh):
            a[:] = step * 16 + k
        # no fresh block shares memory with a held one or another fresh one
        for i, a in enumerate(fresh):
            assert not any(np.shares_memory(a, h) for h in held)
            assert not any(np.shares_memory(a, b) for b in fresh[i + 1:])
        for k, h in enumerate(held):          # the held ones kept their values
            assert (h == (step - 1) * 16 + k).all()
        held = fresh                          # the last step's outputs released, these held
    hits0 = C._pool_stats["hits"]
    again = [_take(n) for _ in range(12)]
    assert C._pool_stats["hits"] - hits0 == 12                      # freed blocks reused, none new
    assert not any(np.shares_memory(a, h) for a in again for h in held)
