"""Random batches for the triton backend's sliding-window KV indices (patches 0160, 0161): a
request-to-token table, host sequence lengths, the batch's request slots, the hybrid pool's
full -> SWA translation, and the indices a Python loop builds from them."""

import torch
from kernel_inputs import DEVICE

WINDOW, POOL, REQS, MAX_LEN = 16, 512, 6, 40


class SwaPool:
    """The hybrid SWA pool's full -> SWA slot translation, as a random table."""

    def __init__(self, seed: int, device=DEVICE):
        g = torch.Generator().manual_seed(seed)
        self.full_to_swa = torch.randperm(POOL + 1, generator=g).to(device)

    def translate_loc_from_full_to_swa(self, loc):
        return self.full_to_swa[loc]


def batch(bs: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    req_to_token = (
        torch.randperm(REQS * MAX_LEN, generator=g).view(REQS, MAX_LEN).to(torch.int32).to(DEVICE)
    )
    seq_lens_cpu = torch.randint(1, MAX_LEN + 1, (bs,), generator=g)
    req_pool_indices = torch.randperm(REQS, generator=g)[:bs].to(DEVICE)
    return req_to_token, seq_lens_cpu, req_pool_indices


def reference(req_to_token, seq_lens_cpu, req_pool_indices, pool):
    """Each request's last min(len, window) tokens, translated, requests one after another."""
    rows = [
        req_to_token[r, max(0, n - WINDOW) : n]
        for r, n in zip(req_pool_indices.tolist(), seq_lens_cpu.tolist())
    ]
    return pool.translate_loc_from_full_to_swa(torch.cat(rows).long())
