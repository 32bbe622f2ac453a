"""The multimodal-cost GPU experiment: the preset text-only against the preset with the towers
loaded (--multimodal), same call, text requests."""

import shlex
from pathlib import Path

from sglang_gemma4.gpu.serve.server import Server
from sglang_gemma4.gpu.stages.table import expand
from sglang_gemma4.gpu.studies import bench


def test_the_towers_side_serves_the_multimodal_checkpoint_and_the_text_side_does_not(tmp_path):
    (step,) = expand("multimodal-cost", tmp_path).steps
    argv = list(step.argv)
    assert argv[argv.index("--variant") + 1] == "e4b"
    assert Path(argv[argv.index("--out") + 1]) == tmp_path / "multimodal-cost-e4b"
    configs = [bench.parse_setup(argv[i + 1]) for i, w in enumerate(argv) if w == "--config"]
    assert [c.name for c in configs] == ["text", "multimodal"]
    served = {}
    for setup in configs:
        server = Server("e4b", setup.build, tmp_path / "log", extra=list(setup.flags))
        served[setup.name] = shlex.split(server.describe().split(": ", 1)[1])
    model = {name: words[words.index("--model-path") + 1] for name, words in served.items()}
    assert model["multimodal"].endswith("e4b-multimodal") and model["text"].endswith("/e4b")
    assert "--enable-multimodal" in served["multimodal"]
    assert "--enable-multimodal" not in served["text"]
    # the launcher's switch, not a flag sglang would refuse
    assert "--multimodal" not in served["multimodal"]


def test_workloads_and_variants_can_be_chosen(tmp_path):
    (step,) = expand("multimodal-cost:26b-a4b:workloads=chat", tmp_path).steps
    argv = list(step.argv)
    assert argv[argv.index("--variant") + 1] == "26b-a4b"
    assert argv[argv.index("--workloads") + 1 : argv.index("--")] == ["chat"]
