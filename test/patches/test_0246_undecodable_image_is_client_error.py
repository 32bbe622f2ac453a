"""0246: an image a request sends inline that PIL cannot decode (truncated, corrupt) or that is past
PIL's decompression-bomb limit is the request's fault: the multimodal processors' per-item loader
raises ValueError (the chat route answers 400, naming the image's index) instead of RuntimeError
(answered 500 "Internal server error"). Broken base64 and bytes that are no image were client errors
already and stay so. Driven on CPU through the loader each image of a request goes through, with
inline data only (no file or URL)."""

import base64
import io
import struct
import zlib

import pytest


def load_image_item(data):
    """What a multimodal processor does with one image of a request (its io worker)."""
    from sglang.srt.managers.schedule_batch import Modality
    from sglang.srt.multimodal.processors.base_processor import BaseMultimodalProcessor

    class Processor(BaseMultimodalProcessor):
        gpu_image_decode = False

    return Processor._load_single_item(data, Modality.IMAGE)


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width: int, height: int, rows: bytes | None = None, color_type: int = 2) -> bytes:
    """A PNG of `width` x `height` whose pixel data is `rows` (default: complete zero rows)."""
    channels = {2: 3, 6: 4}[color_type]
    if rows is None:
        rows = (b"\x00" + b"\x00" * width * channels) * height
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0))
        + png_chunk(b"IDAT", zlib.compress(rows))
        + png_chunk(b"IEND", b"")
    )


def jpeg(width: int = 16, height: int = 16) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 200, 30)).save(out, format="JPEG")
    return out.getvalue()


def inline(data: bytes) -> str:
    return base64.b64encode(data).decode()


BAD = {
    "png-truncated-rows": png(4, 4, rows=b"\x00" * 5),
    "png-rgba-truncated-rows": png(4, 4, rows=b"\x00" * 5, color_type=6),
    "jpeg-cut-in-half": jpeg()[: len(jpeg()) // 2],
    "decompression-bomb": png(20000, 20000, rows=b"\x00" * 16),  # 400 M pixels, header only
}


@pytest.mark.parametrize("name", BAD)
def test_an_undecodable_or_oversized_image_is_a_client_error(name):
    for data in (inline(BAD[name]), f"data:image/png;base64,{inline(BAD[name])}"):
        with pytest.raises(ValueError, match="Error while loading data"):
            load_image_item(data)


@pytest.mark.parametrize(
    "bad",
    ["data:image/png;base64,!!!", inline(b"plain text, no image")],
    ids=["broken-base64", "not-an-image"],
)
def test_broken_base64_and_non_images_stay_client_errors(bad):
    with pytest.raises(ValueError, match="Error while loading data"):
        load_image_item(bad)


def test_whole_images_still_load():
    assert load_image_item(inline(png(4, 3))).size == (4, 3)
    rgba = load_image_item(inline(png(4, 3, color_type=6)))
    assert rgba.size == (4, 3) and rgba.mode == "RGB"
    assert load_image_item(inline(jpeg())).size == (16, 16)


def test_the_encode_server_treats_a_decompression_bomb_as_the_clients_fault():
    """sglang's shared tuple of client media errors (the encode server answers them 400 too)."""
    from PIL import Image

    from sglang.srt.utils.common import CLIENT_MEDIA_EXCEPTIONS

    assert issubclass(Image.DecompressionBombError, CLIENT_MEDIA_EXCEPTIONS)
