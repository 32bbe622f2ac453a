"""0090: Gemma-4 images and video frames with the same patch count go through the vision tower
together (across requests, in chunks bounded by a patch budget) and through the embedder once.
Checked on CPU against the per-image order of 0.5.12 (tower and embedder per image), on random
images of mixed resolutions with padding, 2-D/3-D/4-D inputs and precomputed embeddings mixed in.
The tower is a small stand-in whose output for an image depends on all of that image's patches
and on nothing else, as the real encoder's attention does; the embedder is Gemma-4's own."""

from types import MethodType, SimpleNamespace

import pytest
import torch
from torch import nn

from sglang.srt.models import gemma4_mm

PATCH_DIM, VISION_HIDDEN, TEXT_HIDDEN, K2 = 12, 16, 24, 4  # K2: patches pooled into one soft token
# sglang's norms pick their kernel by platform, not by tensor: on a CUDA machine they are
# sgl_kernel's CUDA ops, which take 16-bit floats only, so there the parts under test run on the GPU
# in bf16
DEVICE, DTYPE, TOL = (
    ("cuda", torch.bfloat16, 2e-2) if torch.cuda.is_available() else ("cpu", torch.float32, 1e-5)
)


class StandInTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(PATCH_DIM, VISION_HIDDEN)
        self.batches = []  # (images, patches) of every call

    @property
    def device(self):
        return self.proj.weight.device

    def forward(self, pixel_values, position_ids):
        self.batches.append(tuple(pixel_values.shape[:2]))
        images, patches, _ = pixel_values.shape
        pooled = self.proj(pixel_values).reshape(images, patches // K2, K2, VISION_HIDDEN).mean(2)
        pooled = pooled + pooled.mean(
            1, keepdim=True
        )  # every patch of the image reaches every token
        valid = (position_ids != -1).all(-1).reshape(images, patches // K2, K2).any(-1)
        return pooled, valid


class CountingEmbedder(gemma4_mm.Gemma4MultimodalEmbedder):
    calls = 0

    def forward(self, inputs_embeds):
        CountingEmbedder.calls += 1
        return super().forward(inputs_embeds)


def model(tower=None, vision_hidden=VISION_HIDDEN, device=DEVICE, dtype=DTYPE, init_std=1.0):
    """The methods under test bound to the parts they read: a vision tower (the stand-in unless
    given), Gemma-4's embedder with random weights, and the language model's device and dtype."""
    torch.manual_seed(0)
    embedder = CountingEmbedder(
        SimpleNamespace(rms_norm_eps=1e-6, hidden_size=vision_hidden, output_proj_dims=None),
        SimpleNamespace(hidden_size=TEXT_HIDDEN),
    ).to(device, dtype)
    for p in embedder.parameters():
        nn.init.normal_(p, std=init_std)
    CountingEmbedder.calls = 0
    fake = SimpleNamespace(
        vision_tower=tower or StandInTower().to(device, dtype),
        embed_vision=embedder,
        config=SimpleNamespace(text_config=SimpleNamespace(hidden_size=TEXT_HIDDEN)),
        language_model=SimpleNamespace(
            device=torch.device(device),
            dtype=lambda: dtype,
            config=SimpleNamespace(hidden_size=TEXT_HIDDEN),
        ),
        parameters=embedder.parameters,
    )
    for name in ("get_image_feature", "get_video_feature", "_get_vision_feature"):
        setattr(
            fake, name, MethodType(getattr(gemma4_mm.Gemma4ForConditionalGeneration, name), fake)
        )
    return fake


def images(count: int, patches: int, real: list[int], seed: int):
    """`count` images of `patches` patches, the n-th with real[n] real patches and padding after."""
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randn(count, patches, PATCH_DIM, generator=g)
    positions = torch.randint(0, 8, (count, patches, 2), generator=g)
    for n, r in enumerate(real):
        pixels[n, r:], positions[n, r:] = 0, -1
    return pixels, positions


def per_image(m, pixels, positions):
    """0.5.12's order of work: the tower and the embedder once per image."""
    out = []
    for pv, pp in zip(
        pixels.reshape(-1, *pixels.shape[-2:]), positions.reshape(-1, *positions.shape[-2:])
    ):
        device = m.language_model.device
        pooled, mask = m.vision_tower(
            pv[None].to(device, m.language_model.dtype()), pp[None].to(device)
        )
        out.append(m.embed_vision(inputs_embeds=pooled[0][mask[0]][None])[0])
    return out


def image_item(pixels, positions):
    return SimpleNamespace(feature=pixels, image_position_ids=positions)


@pytest.mark.parametrize("budget", [16, 36, 10**6])  # patches per tower call
def test_images_of_mixed_sizes_across_items_match_the_per_image_order(monkeypatch, budget):
    monkeypatch.setattr(gemma4_mm, "VISION_BATCH_MAX_PATCHES", budget)
    m = model()
    a = images(2, 8, [8, 5], seed=1)  # a request with two 8-patch images, the second padded
    b = images(1, 16, [13], seed=2)  # one 16-patch image, sent 2-D
    c = images(3, 8, [4, 8, 6], seed=3)
    precomputed = torch.randn(3, TEXT_HIDDEN, device=DEVICE, dtype=DTYPE)
    items = [
        image_item(*a),
        image_item(b[0][0], b[1][0]),
        SimpleNamespace(feature=precomputed, image_position_ids=None),
        image_item(*c),
    ]
    expected = torch.cat([*per_image(m, *a), *per_image(m, *b), precomputed, *per_image(m, *c)])
    m.vision_tower.batches, CountingEmbedder.calls = [], 0

    got = m.get_image_feature(items)

    torch.testing.assert_close(got, expected, rtol=TOL, atol=TOL)
    assert CountingEmbedder.calls == 1
    per_call_8 = max(1, budget // 8)  # the five 8-patch images of two requests share calls
    expected_calls = [(min(per_call_8, 5 - s), 8) for s in range(0, 5, per_call_8)]
    expected_calls += [(1, 16)]
    assert m.vision_tower.batches == expected_calls


def test_video_frames_are_batched_as_images():
    m = model()
    frames = images(6, 8, [8, 8, 7, 8, 5, 8], seed=4)
    video = SimpleNamespace(
        feature=frames[0].reshape(2, 3, 8, PATCH_DIM),  # (videos, frames, patches, ...)
        video_position_ids=frames[1].reshape(2, 3, 8, 2),
    )
    expected = torch.cat(per_image(m, *frames))
    m.vision_tower.batches = []
    torch.testing.assert_close(m.get_video_feature([video]), expected, rtol=TOL, atol=TOL)
    assert m.vision_tower.batches == [(6, 8)]


def test_no_images_and_missing_positions():
    m = model()
    assert m.get_image_feature([]).shape == (0, TEXT_HIDDEN)
    with pytest.raises(ValueError, match=r"pixel_values\[0\] has no matching image_position_ids"):
        m.get_image_feature(
            [SimpleNamespace(feature=torch.randn(1, 8, PATCH_DIM), image_position_ids=None)]
        )


def real_vision_tower(monkeypatch, backend: str, dtype):
    """Gemma-4's own vision encoder, small, with random weights."""
    from transformers import Gemma4VisionConfig

    import sglang.srt.layers.attention.vision as vision_attention
    from sglang.srt.models import gemma4_vision
    from sglang.srt.models.gemma4_vision import Gemma4VisionEncoder

    # the multimodal settings a server publishes at start: only the attention backend is read
    for module in (gemma4_vision, vision_attention):
        monkeypatch.setattr(module, "get_mm", lambda: SimpleNamespace(mm_attention_backend=backend))
    config = Gemma4VisionConfig(
        hidden_size=VISION_HIDDEN * 4,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        patch_size=2,
        pooling_kernel_size=2,
    )
    torch.manual_seed(1)
    tower = Gemma4VisionEncoder(config).to(DEVICE_FOR[backend], dtype)
    for p in tower.parameters():
        nn.init.normal_(p, std=0.05)
    return tower, config


DEVICE_FOR = {"triton_attn": "cuda", "sdpa": DEVICE}


def grid_images(count: int, side: int, real_rows: list[int], patch_pixels: int, seed: int):
    """`count` images of side x side patches; the n-th is real_rows[n] patch rows tall, padded."""
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randn(count, side * side, patch_pixels, generator=g)
    xy = torch.stack(
        torch.meshgrid(torch.arange(side), torch.arange(side), indexing="xy"), -1
    ).reshape(-1, 2)
    positions = xy.repeat(count, 1, 1)
    for n, rows in enumerate(real_rows):
        pixels[n, rows * side :], positions[n, rows * side :] = 0, -1
    return pixels, positions


def with_real_tower(monkeypatch, backend: str, dtype):
    tower, config = real_vision_tower(monkeypatch, backend, dtype)
    return model(
        tower, config.hidden_size, DEVICE_FOR[backend], dtype, init_std=0.05
    ), 3 * config.patch_size**2


def test_real_vision_tower_one_image_per_size_matches_per_image(monkeypatch, one_process_group):
    # sdpa vision attention (as on CPU) takes one image per call: three sizes, one image each
    m, patch_pixels = with_real_tower(monkeypatch, "sdpa", DTYPE)
    images_by_size = [
        grid_images(1, side, [rows], patch_pixels, seed=side)
        for side, rows in ((4, 4), (8, 6), (6, 5))
    ]
    with torch.no_grad():
        expected = torch.cat(
            [e for pixels, positions in images_by_size for e in per_image(m, pixels, positions)]
        )
        CountingEmbedder.calls = 0
        got = m.get_image_feature([image_item(*pair) for pair in images_by_size])
    torch.testing.assert_close(got, expected, rtol=max(TOL, 1e-4), atol=max(TOL, 1e-4))
    assert CountingEmbedder.calls == 1


@pytest.mark.gpu
def test_real_vision_tower_batched_matches_per_image(monkeypatch, one_process_group):
    m, patch_pixels = with_real_tower(monkeypatch, "triton_attn", torch.bfloat16)
    small = grid_images(3, 4, [4, 2, 3], patch_pixels, seed=5)
    large = grid_images(2, 8, [8, 6], patch_pixels, seed=6)
    with torch.no_grad():
        expected = torch.cat([*per_image(m, *small), *per_image(m, *large)])
        got = m.get_image_feature([image_item(*small), image_item(*large)])
    torch.testing.assert_close(got.float(), expected.float(), rtol=2e-2, atol=2e-2)
