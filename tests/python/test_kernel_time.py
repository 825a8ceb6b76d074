"""ci/kernel_time.py on a made-up trace: kinds by kernel name, the span and the idle time."""
import pytest

from scripts import import_script

kernel_time = import_script("ci/kernel_time.py")


def kernel(name, ts, dur, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


def test_kinds_span_and_idle():
    trace = {"traceEvents": [
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 0, 40),
        kernel("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", 30, 20),  # overlaps the first
        kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 60, 10),
        kernel("vectorized_layer_norm_kernel", 70, 5),
        kernel("cunn_SoftMaxForward", 80, 5),
        kernel("multi_tensor_apply_kernel", 85, 5),
        kernel("elementwise_kernel GeluCUDAKernelImpl", 90, 10),
        kernel("Memcpy DtoD", 100, 2, cat="gpu_memcpy"),
        kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 100, 4),  # beside the copy, on NCCL's stream
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 500},  # host: not counted
    ]}
    result = kernel_time.breakdown(trace)
    assert result["kinds"] == {"matmul": 60, "attention": 10, "layer_norm": 5, "softmax/loss": 5,
                               "optimizer": 5, "other": 10, "copy": 2, "collective": 4}
    assert result["kernels"]["sm90_xmma_gemm_bf16bf16_bf16f32"] == 40
    assert result["span_us"] == 104
    assert result["idle_us"] == 104 - (50 + 10 + 5 + 5 + 5 + 10 + 4)  # 50..60 and 75..80 idle


def test_a_trace_without_kernels_is_refused():
    with pytest.raises(ValueError):
        kernel_time.breakdown({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 0, "dur": 1}]})
