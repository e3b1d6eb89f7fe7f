"""``gpu_envs.utils.arrays``: zero-copy DLPack interop, checked by buffer pointers, and staged copies.

The CPU is a DLPack device like any other, so every zero-copy claim is checked here with
``data_ptr`` (and a write through one side seen by the other, where the side is mutable).
CUDA-only paths (CuPy, pinned staging) are in tests/test_cupy.py and the ``cuda`` params.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from gpu_envs import DeviceMismatchError, InvalidArgumentError
from gpu_envs.utils.arrays import HostStaging, RowBlocks, array_device, framework_of, from_torch, is_zero_copy, to_torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


# ----------------------------------------------------------------------------- numpy
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("shape", [(), (5,), (3, 4)])
def test_numpy_enters_torch_without_copy(dtype, shape):
    x = np.zeros(shape, dtype)
    t = to_torch(x)
    assert t.data_ptr() == x.__array_interface__["data"][0] and is_zero_copy(x, t)
    assert tuple(t.shape) == shape and t.dtype == torch.from_numpy(np.zeros(1, dtype)).dtype
    x[...] = 1
    assert bool((t == 1).all()), "a write through numpy is seen by the tensor"


def test_read_only_numpy_is_shared_without_warning(recwarn):
    x = np.arange(6, dtype=np.float32)
    x.flags.writeable = False
    t = to_torch(x)
    assert is_zero_copy(x, t)
    assert not [w for w in recwarn if "not writable" in str(w.message)]


def test_byte_swapped_numpy_is_copied_with_correct_values():
    x = np.arange(4, dtype=">i4")
    t = to_torch(x)
    assert t.tolist() == [0, 1, 2, 3] and t.dtype == torch.int32


def test_torch_to_numpy_shares_memory_and_refuses_device_tensors():
    t = torch.arange(6.0)
    x = from_torch(t, "numpy")
    assert is_zero_copy(x, t)
    t[0] = 42
    assert x[0] == 42
    with pytest.raises(DeviceMismatchError, match="CPU tensor"):
        from_torch(torch.empty(3, device="meta"), "numpy")


# ------------------------------------------------------------------------------ torch
def test_torch_passes_through():
    t = torch.arange(3)
    assert to_torch(t) is t and to_torch(t, "cpu") is t and from_torch(t, "torch") is t
    assert framework_of(t) == "torch" and array_device(t) == torch.device("cpu")


# -------------------------------------------------------------------------------- jax
jax_only = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="JAX is not installed (extra 'jax')")


@jax_only
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8", "bool"])
@pytest.mark.parametrize("shape", [(), (7,), (2, 3)])
def test_jax_to_torch_zero_copy(dtype, shape):
    import jax.numpy as jnp

    x = jnp.ones(shape, dtype)
    t = to_torch(x)
    assert framework_of(x) == "jax" and array_device(x) == torch.device("cpu")
    assert t.data_ptr() == x.unsafe_buffer_pointer() and is_zero_copy(x, t)
    assert tuple(t.shape) == shape and t.dtype == getattr(torch, dtype)
    np.testing.assert_array_equal(t.numpy(), np.asarray(x))


@jax_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool, torch.uint8])
def test_torch_to_jax_zero_copy(dtype):
    t = (torch.arange(12) % 2).to(dtype).reshape(3, 4)
    x = from_torch(t, "jax")
    assert x.unsafe_buffer_pointer() == t.data_ptr() and is_zero_copy(x, t)
    np.testing.assert_array_equal(np.asarray(x), t.numpy())


@jax_only
def test_torch_to_jax_transposed_view_is_still_zero_copy():
    t = torch.arange(12.0).reshape(3, 4).t()
    x = from_torch(t, "jax")
    assert is_zero_copy(x, t)
    np.testing.assert_array_equal(np.asarray(x), t.numpy())


@jax_only
def test_torch_to_jax_strided_view_is_made_dense_once():
    base = torch.arange(20.0).reshape(4, 5)
    view = base[:, 2:3]  # strides (5, 1): not compact, XLA refuses to alias it
    x = from_torch(view, "jax")
    assert not is_zero_copy(x, view)
    np.testing.assert_array_equal(np.asarray(x), view.numpy())


@jax_only
def test_64_bit_tensors_are_narrowed_for_jax_without_x64():
    import jax

    assert not jax.config.jax_enable_x64
    x = from_torch(torch.tensor([0, 1, 2**31 - 1]), "jax")
    assert x.dtype == np.int32 and np.asarray(x).tolist() == [0, 1, 2**31 - 1]
    y = from_torch(torch.tensor([0.5, -1.5], dtype=torch.float64), "jax")
    assert y.dtype == np.float32 and np.asarray(y).tolist() == [0.5, -1.5]


@jax_only
def test_round_trip_keeps_one_buffer():
    t = torch.arange(8.0)
    back = to_torch(from_torch(t, "jax"))
    assert back.data_ptr() == t.data_ptr()


# ------------------------------------------------------------------------ any DLPack
class _Producer:
    """A foreign array type gpu_envs has never heard of, exporting a numpy buffer by DLPack."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, stream=None, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_any_dlpack_producer_enters_torch_without_copy():
    x = np.arange(5, dtype=np.float32)
    producer = _Producer(x)
    t = to_torch(producer)
    assert framework_of(producer) == "dlpack" and t.data_ptr() == x.__array_interface__["data"][0]
    assert is_zero_copy(producer, t)


def test_unknown_objects_and_devices_are_refused():
    with pytest.raises(InvalidArgumentError, match="__dlpack__"):
        to_torch([1.0, 2.0])
    with pytest.raises(InvalidArgumentError, match="unknown framework"):
        from_torch(torch.zeros(1), "tensorflow")

    class OpenCL(_Producer):
        def __dlpack_device__(self):
            return (4, 0)  # kDLOpenCL

    with pytest.raises(DeviceMismatchError, match="DLPack device type 4"):
        array_device(OpenCL(np.zeros(1)))


# ---------------------------------------------------------------------- other device
@pytest.mark.parametrize("device", DEVICES)
def test_staging_puts_fresh_tensors_on_the_target(device):
    staging = HostStaging([((3, 2), torch.float32)], device)
    assert staging.packed == (device != "cpu"), "a CPU target needs no staging buffer: one copy, not two"
    assert device == "cpu" or staging.host.is_pinned() == (device == "cuda")
    a = staging.put(np.full((3, 2), 2.0))  # float64 in, cast on the way into the buffer
    b = (
        to_torch(np.full((3, 2), 3.0, np.float32), device, staging=staging)
        if device != "cpu"
        else staging.put(np.full((3, 2), 3.0))
    )
    assert a.device.type == device and a.dtype == torch.float32
    assert bool((a.cpu() == 2).all()), "a published tensor is never rewritten by a later put"
    assert bool((b.cpu() == 3).all())
    assert len({a.data_ptr(), b.data_ptr()}) == 2
    assert staging.host is None or staging.host.data_ptr() not in (a.data_ptr(), b.data_ptr())
    c = staging.put(torch.full((3, 2), 4.0, dtype=torch.float64))  # a CPU tensor is host data too
    assert c.device.type == device and c.dtype == torch.float32 and bool((c.cpu() == 4).all())


def test_packed_staging_gives_the_values_in_every_dtype():
    fields = [
        ((3, 2), torch.float32),
        ((3,), torch.bool),
        ((3,), torch.float64),
        ((3,), torch.int8),
        ((3, 5), torch.uint8),
        ((3,), torch.float32),
    ]
    values = [
        np.arange(6, dtype=np.float32).reshape(3, 2),
        np.array([True, False, True]),
        np.array([1.5, 2.5, 3.5]),
        np.array([-1, 2, 3], np.int8),
        np.arange(15, dtype=np.uint8).reshape(3, 5),
        np.array([0.25, 0.5, 0.75]),  # float64 -> float32 on the way
    ]
    for packed in (True, False):
        stage = HostStaging(fields, "cpu", packed=packed)
        host = stage.host
        first = stage.publish(values)
        for got, want, (shape, dtype) in zip(first, values, fields, strict=True):
            assert got.dtype == dtype and tuple(got.shape) == shape
            np.testing.assert_array_equal(got.numpy(), want.astype(got.numpy().dtype))
        second = stage.publish([None] * 5 + [np.array([9.0, 9.0, 9.0])])
        assert second[:5] == [None] * 5 and second[5].tolist() == [9.0, 9.0, 9.0]
        assert first[5].tolist() == [0.25, 0.5, 0.75], "a published tensor changed after the next publish"
        assert stage.host is host and (host is None) == (not packed), "one packed buffer, allocated once"


def test_host_staging_assembles_a_field_from_row_blocks():
    """Blocks from several sources (Ray workers) land in their rows with one copy, on both paths."""
    fields = [((5, 2), torch.float32), ((5,), torch.bool), ((5,), torch.float32)]
    obs = [np.arange(6, dtype=np.float64).reshape(3, 2), np.array([[7.0, 8.0], [9.0, 10.0]])]
    done = [np.array([True, False, False]), np.array([False, True])]
    for packed in (True, False):
        stage = HostStaging(fields, "cpu", packed=packed)
        got_obs, got_done, got_rew = stage.publish([RowBlocks(obs), RowBlocks(done), np.arange(5.0)])
        assert got_obs.dtype == torch.float32 and got_obs.tolist() == np.concatenate(obs).tolist()
        assert got_done.tolist() == [True, False, False, False, True]
        assert got_rew.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
        with pytest.raises(InvalidArgumentError, match="3 rows in all fill a field of 5 rows"):
            stage.publish([RowBlocks(obs[:1]), None, None])  # 3 rows for a 5-row field


def test_to_torch_without_staging_moves_explicitly():
    t = to_torch(np.ones(3, np.float32), "meta")
    assert t.device.type == "meta" and t.shape == (3,)
    with pytest.raises(DeviceMismatchError, match="host data"):
        HostStaging([((1,), torch.float32)], "cpu").put(torch.empty(1, device="meta"))
    with pytest.raises(InvalidArgumentError, match="publish"):
        HostStaging([((1,), torch.float32)] * 2, "cpu").put(np.zeros(1))


@jax_only
def test_jax_argument_is_a_view_on_the_cpu():
    import jax

    from gpu_envs.utils.arrays import jax_argument

    t = torch.arange(6, dtype=torch.float32)
    arg = jax_argument(t)
    assert isinstance(arg, np.ndarray) and arg.__array_interface__["data"][0] == t.data_ptr()
    assert jax.device_put(arg).unsafe_buffer_pointer() == t.data_ptr(), "JAX's CPU client aliases it"
    narrowed = jax_argument(torch.tensor([1, 2], dtype=torch.int64))
    assert narrowed.dtype == np.int32 and narrowed.tolist() == [1, 2]
