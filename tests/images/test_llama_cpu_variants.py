"""images/llama_cpu_variants.py: which llama.cpp CPU backends the shard image builds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "llama_cpu_variants", ROOT / "images" / "llama_cpu_variants.py"
)
variants = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(variants)

# The shape of llama.cpp's ggml/src/CMakeLists.txt (0.3.36): an x86 list inside the
# GGML_CPU_ALL_VARIANTS branch, after an earlier, unrelated x86 branch.
CMAKE = """\
function(ggml_add_cpu_backend_variant tag_name)
    if (GGML_SYSTEM_ARCH STREQUAL "x86")
        foreach (feat ${ARGN})
        endforeach()
    elseif (GGML_SYSTEM_ARCH STREQUAL "ARM")
    endif()
endfunction()

if (GGML_CPU_ALL_VARIANTS)
    if (GGML_SYSTEM_ARCH STREQUAL "x86")
        ggml_add_cpu_backend_variant(x64)
        ggml_add_cpu_backend_variant(sse42              SSE42)
        ggml_add_cpu_backend_variant(haswell            SSE42 AVX F16C FMA AVX2 BMI2)
        ggml_add_cpu_backend_variant(icelake            SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI)
        if (NOT MSVC)
            ggml_add_cpu_backend_variant(zen4           SSE42 AVX F16C FMA AVX2 AVX512 AVX512_BF16)
        endif()
        if (NOT MSVC)
            ggml_add_cpu_backend_variant(sapphirerapids SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AMX_TILE AMX_INT8)
        endif()
    elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")
            ggml_add_cpu_backend_variant(armv8.0_1)
    endif()
endif()
"""


def test_the_x86_variants_are_read_from_the_all_variants_branch_only():
    assert variants.x86_variants(CMAKE) == ["x64", "sse42", "haswell", "icelake", "zen4", "sapphirerapids"]


def test_only_the_named_variants_stay_and_the_rest_are_commented_out():
    out = variants.keep_variants(CMAKE, ["x64", "haswell", "icelake"])
    assert variants.x86_variants(out) == ["x64", "haswell", "icelake"]
    assert "# not built in this image: ggml_add_cpu_backend_variant(sse42" in out
    assert "ggml_add_cpu_backend_variant(armv8.0_1)" in out  # other architectures untouched
    assert out.count("\n") == CMAKE.count("\n")


def test_all_keeps_every_variant_but_the_amx_one():
    out = variants.keep_variants(CMAKE, ["all"])
    assert variants.x86_variants(out) == ["x64", "sse42", "haswell", "icelake", "zen4"]


def test_the_amx_variant_is_refused_by_name():
    with pytest.raises(variants.VariantError, match=r"sapphirerapids.*AMX"):
        variants.keep_variants(CMAKE, ["haswell", "sapphirerapids"])


def test_an_unknown_variant_is_refused_with_the_defined_ones():
    with pytest.raises(variants.VariantError, match=r"unknown CPU variant\(s\) skylake; defined: x64, sse42"):
        variants.keep_variants(CMAKE, ["skylake"])


def test_a_changed_llama_cpp_layout_is_an_error_not_a_silent_full_build():
    with pytest.raises(variants.VariantError, match="layout changed"):
        variants.keep_variants("project(ggml)\n", ["haswell"])


def test_the_command_line_takes_the_build_argument_as_one_string(tmp_path, capsys):
    path = tmp_path / "CMakeLists.txt"
    path.write_text(CMAKE)
    assert variants.main(["prog", str(path), "x64 haswell"]) == 0
    assert variants.x86_variants(path.read_text()) == ["x64", "haswell"]
    assert "CPU variants built: x64, haswell" in capsys.readouterr().out
