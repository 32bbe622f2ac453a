"""0.5.23's sliding-window update reads the KV ids through the backend's KV index translator
(pack_read_stream); a stand-in that gathers them from a request-to-token table in Python, for the
tests of 0160 and 0161 on 0.5.23. Its output is what the window update hands on, so the tests check
the update's sizing and rails around it, not the gather."""

from types import SimpleNamespace

import torch

from swa_windows import MAX_LEN, REQS, WINDOW


class Translator:
    window_kv_kind = "window"

    def __init__(self, req_to_token):
        self.req_to_token = req_to_token

    def pack_read_stream(self, plan, *, req_pool_indices, seq_lens, indptr, out, kv_start_idx, kind,
                         token_mapping=None):
        if out.device.type != "meta":
            for i, (row, n, start) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist(),
                                                    kv_start_idx.tolist())):
                first = int(indptr[i])
                out[first:first + n] = self.req_to_token[row, start:start + n]
        return True  # the ids are the window pool's own


IDENTITY = SimpleNamespace(translate_loc_from_full_to_swa=lambda loc: loc)


def meta_batch(bs: int):
    """A batch whose device tensors live on the meta device: reading any of their values raises."""
    return (torch.zeros(REQS, MAX_LEN, dtype=torch.int32, device="meta"),
            torch.ones(bs, dtype=torch.int64, device="meta"), torch.zeros(bs, dtype=torch.int64, device="meta"))




class NoGather(Translator):
    """The translator's gather left out (it is not this update's work), so that a check for host
    waits sees the window update's own reads only."""

    def pack_read_stream(self, *args, **kwargs):
        return True


__all__ = ["IDENTITY", "MAX_LEN", "REQS", "NoGather", "Translator", "WINDOW", "meta_batch"]
