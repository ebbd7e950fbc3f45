"""GPU presets for the roofline: peak dense tensor FLOP/s, HBM bandwidth, host link, NVLink.

Figures are the vendor's datasheet peaks, dense (no 2:4 sparsity), for the SXM (or PCIe
card) variant named; the host link is the PCIe generation's x16 peak per direction, which
bounds a CPU-tier reload. NVLink (SXM parts: A100 600 GB/s, H100 and H200 900 GB/s per
GPU, both directions, the same datasheets) carries tensor parallelism's all-reduces; the
PCIe cards (L40S, L4) have none and use the host link. A roofline built on them is a lower
bound on step time, not a measurement. ``custom`` takes every figure from the options.

>>> gpu_preset("H100").bf16_tflops
989.4
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["GpuPreset", "GPUS", "GPU_NAMES", "gpu_preset", "custom_gpu"]

_NVIDIA = "https://www.nvidia.com/en-us/data-center/"


@dataclass(frozen=True)
class GpuPreset:
    """One GPU: peak dense bf16 and fp8 TFLOP/s (fp8 None when the chip has none), HBM
    bandwidth and host-link bandwidth (GB/s, 10^9 bytes/s), memory (GB), and the source."""

    name: str
    bf16_tflops: float
    fp8_tflops: float | None
    hbm_gbps: float
    host_link_gbps: float
    memory_gb: float | None = None
    host_link: str = ""
    source: str = ""
    #: NVLink bandwidth per GPU, both directions together (the datasheet's figure); None:
    #: no NVLink, GPUs talk over the host link (PCIe)
    nvlink_gbps: float | None = None

    @property
    def peer_gbps(self) -> float:
        """GB/s one GPU sends to its peers in one direction: half the NVLink figure, else
        the host link's (PCIe, per direction)."""
        return self.nvlink_gbps / 2 if self.nvlink_gbps else self.host_link_gbps

    @property
    def peer_link(self) -> str:
        """``NVLink 900 GB/s (450 GB/s each way)`` or the host link's name."""
        if self.nvlink_gbps:
            return f"NVLink {self.nvlink_gbps:g} GB/s ({self.peer_gbps:g} GB/s each way)"
        return f"{self.host_link or 'host link'} {self.host_link_gbps:g} GB/s (no NVLink)"

    def __post_init__(self) -> None:
        for field in ("bf16_tflops", "hbm_gbps", "host_link_gbps"):
            if not getattr(self, field) > 0:
                raise ValueError(f"{self.name}: {field} must be > 0, got {getattr(self, field)}")
        if self.fp8_tflops is not None and not self.fp8_tflops > 0:
            raise ValueError(f"{self.name}: fp8_tflops must be > 0, got {self.fp8_tflops}")

    def flops(self, dtype: str) -> float:
        """Peak dense FLOP/s for weights in ``dtype`` (bf16 or fp8); ValueError without fp8."""
        if dtype == "bf16":
            return self.bf16_tflops * 1e12
        if dtype == "fp8":
            if self.fp8_tflops is None:
                raise ValueError(f"{self.name} has no fp8 tensor cores: use bf16 weights")
            return self.fp8_tflops * 1e12
        raise ValueError(f"unknown weight dtype {dtype!r}: expected bf16 or fp8")

    def describe(self, dtype: str = "bf16") -> str:
        """``H100 SXM: 989.4 TFLOP/s bf16 dense, 3,350 GB/s HBM, 64 GB/s host link (PCIe 5.0 x16)``."""
        tflops = self.bf16_tflops if dtype == "bf16" else self.fp8_tflops
        link = f" ({self.host_link})" if self.host_link else ""
        return (f"{self.name}: {tflops:g} TFLOP/s {dtype} dense, {self.hbm_gbps:,g} GB/s "
                f"memory, {self.host_link_gbps:g} GB/s host link{link}")


GPUS: dict[str, GpuPreset] = {gpu.name.split()[0].lower(): gpu for gpu in (
    GpuPreset("A100 SXM 80GB", 312.0, None, 2039.0, 32.0, 80, "PCIe 4.0 x16",
              _NVIDIA + "a100/", 600.0),
    GpuPreset("H100 SXM", 989.4, 1978.9, 3350.0, 64.0, 80, "PCIe 5.0 x16",
              _NVIDIA + "h100/", 900.0),
    GpuPreset("H200 SXM", 989.4, 1978.9, 4800.0, 64.0, 141, "PCIe 5.0 x16",
              _NVIDIA + "h200/", 900.0),
    GpuPreset("L40S", 362.05, 733.0, 864.0, 32.0, 48, "PCIe 4.0 x16", _NVIDIA + "l40s/"),
    GpuPreset("L4", 121.0, 242.5, 300.0, 32.0, 24, "PCIe 4.0 x16", _NVIDIA + "l4/"),
)}
#: the names ``--gpu-type`` accepts: the presets' and ``custom``
GPU_NAMES = [gpu.name.split()[0] for gpu in GPUS.values()] + ["custom"]


def gpu_preset(name: str) -> GpuPreset:
    """A preset by name (case-insensitive: a100, h100, h200, l40s, l4)."""
    try:
        return GPUS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown GPU {name!r}: expected one of "
                         f"{', '.join(g.name.split()[0] for g in GPUS.values())} or custom") \
            from None


def custom_gpu(base: GpuPreset | None, *, bf16_tflops: float | None = None,
               fp8_tflops: float | None = None, hbm_gbps: float | None = None,
               host_link_gbps: float | None = None) -> GpuPreset:
    """``base`` with the given figures replaced, or (``base`` None) a ``custom`` GPU that
    needs bf16 TFLOP/s, HBM and host-link bandwidth; ValueError naming what is missing."""
    given = {"bf16_tflops": bf16_tflops, "fp8_tflops": fp8_tflops, "hbm_gbps": hbm_gbps,
             "host_link_gbps": host_link_gbps}
    if base is None:
        missing = [k for k in ("bf16_tflops", "hbm_gbps", "host_link_gbps") if given[k] is None]
        if missing:
            raise ValueError("a custom GPU needs " + ", ".join(
                "--" + k.replace("bf16_tflops", "gpu_tflops").replace("hbm", "gpu_hbm")
                .replace("_", "-") for k in missing))
        return GpuPreset("custom", bf16_tflops, fp8_tflops, hbm_gbps, host_link_gbps,
                         source="given on the command line")
    changed = {k: v for k, v in given.items() if v is not None}
    if not changed:
        return base
    return replace(base, name=f"{base.name} (modified)", **changed,
                   source=f"{base.source}; {', '.join(changed)} given on the command line")
