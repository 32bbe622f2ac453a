"""0245: an image, audio or video that a request names by http(s) URL or by a path on the server is
fetched or read only when the server enables it (SGLANG_MM_MEDIA_SOURCES=url, =path or =url,path).
Without them, sglang's media loaders refuse such a source with a ValueError naming the field (the
chat route answers it 400), before any request leaves the server or any file is opened: a missing
file and an existing one are refused alike. Inline media (base64 and data: URLs) is unchanged.
Driven through the loader the multimodal processors call for each item."""

import base64
import io

import pytest


def png(width: int = 2, height: int = 2) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(out, format="PNG")
    return out.getvalue()


def load_image_item(data):
    """What a multimodal processor does with one image of a request (its io worker)."""
    from sglang.srt.managers.schedule_batch import Modality
    from sglang.srt.multimodal.processors.base_processor import BaseMultimodalProcessor

    class Processor(BaseMultimodalProcessor):
        gpu_image_decode = False

    return Processor._load_single_item(data, Modality.IMAGE)


class Session:
    """get_mm_http_session() stand-in that records what the server would fetch."""

    def __init__(self, body: bytes = b""):
        self.fetched, self.body = [], body

    def get(self, url, **kwargs):
        self.fetched.append(url)
        session = self

        class Response:
            content = session.body
            # what sglang 0.5.18's download_remote_media also reads
            headers, status_code = {}, 200

            def iter_content(self, chunk_size):
                yield session.body

            def raise_for_status(self):
                pass

            def close(self):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        return Response()


@pytest.fixture
def http(monkeypatch):
    from sglang.srt.utils import common

    session = Session(png())
    monkeypatch.setattr(common, "get_mm_http_session", lambda: session)
    return session


@pytest.fixture
def image_file(tmp_path):
    path = tmp_path / "secret.png"
    path.write_bytes(png())
    return path


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/latest/meta-data/x.png", "https://example.com/cat.jpg"]
)
def test_a_remote_image_is_refused_without_fetching_it(http, url, monkeypatch):
    monkeypatch.delenv("SGLANG_MM_MEDIA_SOURCES", raising=False)
    with pytest.raises(
        ValueError,
        match="image_url: fetching media from a URL is disabled.*SGLANG_MM_MEDIA_SOURCES=url",
    ):
        load_image_item(url)
    assert http.fetched == []


@pytest.mark.parametrize("sources", ["url", "path, url"])
def test_a_remote_image_is_fetched_when_enabled(http, monkeypatch, sources):
    monkeypatch.setenv("SGLANG_MM_MEDIA_SOURCES", sources)
    image = load_image_item("https://example.com/cat.png")
    assert http.fetched == ["https://example.com/cat.png"] and image.size == (2, 2)


def test_an_image_on_the_server_is_refused_without_opening_it(image_file, monkeypatch):
    import builtins

    monkeypatch.delenv("SGLANG_MM_MEDIA_SOURCES", raising=False)
    opened = []
    real_open = builtins.open
    monkeypatch.setattr(
        builtins, "open", lambda f, *a, **k: opened.append(str(f)) or real_open(f, *a, **k)
    )
    for source in (str(image_file), f"file://{image_file}", str(image_file.with_name("none.png"))):
        with pytest.raises(
            ValueError, match="image_url: reading media from a path on the server is disabled"
        ):
            load_image_item(source)
    # a bare absolute path may be base64 (a JPEG's starts with "/9j/"): decoded, never looked up
    for source in ("/etc/hostname", str(image_file.with_suffix(""))):
        with pytest.raises(ValueError, match="Error while loading data"):
            load_image_item(source)
    assert not [
        f for f in opened if f.startswith(str(image_file.parent)) or f == "/etc/hostname"
    ], opened


def test_an_image_on_the_server_is_read_when_enabled(image_file, monkeypatch):
    monkeypatch.setenv("SGLANG_MM_MEDIA_SOURCES", "url")  # URLs alone do not open files
    with pytest.raises(ValueError, match="reading media from a path on the server is disabled"):
        load_image_item(str(image_file))
    monkeypatch.setenv("SGLANG_MM_MEDIA_SOURCES", "path")
    assert load_image_item(str(image_file)).size == (2, 2)
    assert load_image_item(f"file://{image_file}").size == (2, 2)


def test_a_missing_and_an_existing_file_are_refused_alike(image_file, monkeypatch):
    monkeypatch.delenv("SGLANG_MM_MEDIA_SOURCES", raising=False)
    answers = []
    for source in (str(image_file), str(image_file.with_name("missing.png"))):
        with pytest.raises(ValueError) as refused:
            load_image_item(source)
        answers.append(str(refused.value).replace(source, "PATH"))
    assert answers[0] == answers[1]


def test_a_base64_jpeg_is_decoded_not_read_as_a_path(monkeypatch):
    """Every base64 JPEG starts with "/9j/": upstream opens it as a file (FileNotFoundError, a
    500)."""
    from PIL import Image

    monkeypatch.delenv("SGLANG_MM_MEDIA_SOURCES", raising=False)
    out = io.BytesIO()
    Image.new("RGB", (3, 2), (1, 2, 3)).save(out, format="JPEG")
    encoded = base64.b64encode(out.getvalue()).decode()
    assert encoded.startswith("/9j/")
    assert load_image_item(encoded).size == (3, 2)


def test_inline_images_still_load(monkeypatch):
    monkeypatch.delenv("SGLANG_MM_MEDIA_SOURCES", raising=False)
    encoded = base64.b64encode(png()).decode()
    assert load_image_item(f"data:image/png;base64,{encoded}").size == (2, 2)
    assert load_image_item(encoded).size == (2, 2)
    assert load_image_item(png()).size == (2, 2)


@pytest.mark.parametrize(
    "bad",
    [
        "data:image/png;base64,!!!not base64!!!",
        "bm90IGFuIGltYWdl",
        base64.b64encode(b"%PDF-1.4 not an image").decode(),
    ],
    ids=["broken-base64", "text-bytes", "pdf-bytes"],
)
def test_bad_inline_images_are_client_errors(bad):
    with pytest.raises(ValueError, match="Error while loading data"):
        load_image_item(bad)


def test_remote_and_local_audio_and_video_are_refused(http, image_file, monkeypatch):
    from sglang.srt.utils import common

    monkeypatch.setenv("SGLANG_MM_MEDIA_SOURCES", "")
    with pytest.raises(ValueError, match="audio_url: fetching media from a URL is disabled"):
        common.load_audio("https://example.com/a.wav")
    for source in (str(image_file), f"file://{image_file}"):
        with pytest.raises(
            ValueError, match="audio_url: reading media from a path on the server is disabled"
        ):
            common.load_audio(source)
    with pytest.raises(ValueError, match="video_url: fetching media from a URL is disabled"):
        common.get_video_bytes("https://example.com/v.mp4")
    with pytest.raises(
        ValueError, match="video_url: reading media from a path on the server is disabled"
    ):
        common.get_video_bytes(f"file://{image_file}")
    # a bare path is not looked at: it is decoded as base64 (and fails as such), whether it exists
    # or not
    for source in (str(image_file), str(image_file.with_name("missing.mp4"))):
        with pytest.raises(ValueError) as refused:
            common.get_video_bytes(source)
        assert "disabled" not in str(refused.value)
    assert http.fetched == []
    monkeypatch.setenv("SGLANG_MM_MEDIA_SOURCES", "path")
    assert common.get_video_bytes(str(image_file)) == image_file.read_bytes()
