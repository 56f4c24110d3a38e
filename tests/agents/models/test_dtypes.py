"""`"auto"` dtypes: bf16 only where the hardware runs it natively."""

from __future__ import annotations

import pytest

from optima_agents.models import dtypes
from optima_train.trl_glue import use_bf16


@pytest.fixture(params=[True, False], ids=["native-bf16", "emulated-bf16"])
def native(request, monkeypatch) -> bool:
    monkeypatch.setattr(dtypes, "cpu_has_native_bf16", lambda: request.param)
    return request.param


def test_auto_follows_the_cpu(native) -> None:
    assert dtypes.resolve_dtype("auto", "cpu") == ("bfloat16" if native else "float32")
    assert use_bf16("auto", "cpu") is native


def test_auto_is_bf16_on_accelerators(native) -> None:
    assert dtypes.resolve_dtype("auto", "cuda") == "bfloat16"
    assert dtypes.resolve_dtype("auto", "cuda:1") == "bfloat16"
    assert use_bf16("auto", "cuda") is True


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_explicit_dtypes_pass_through(native, dtype) -> None:
    assert dtypes.resolve_dtype(dtype, "cpu") == dtype
    assert dtypes.resolve_dtype_here(dtype) == dtype


def test_explicit_bf16_setting_is_kept(native) -> None:
    assert use_bf16(True, "cpu") is True and use_bf16(False, "cuda") is False


def test_model_section_resolves_for_its_device(native) -> None:
    from optima_train.config.sections import ModelSection

    assert ModelSection(dtype="auto", device="cpu").resolved_dtype() == ("bfloat16" if native else "float32")
    assert ModelSection(dtype="float32", device="cuda").resolved_dtype() == "float32"


def test_this_machine_is_probed_without_error() -> None:
    assert isinstance(dtypes.cpu_has_native_bf16(), bool)
