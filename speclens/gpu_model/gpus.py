"""The GPUs `evals.whatif` predicts for: datasheet figures, per GPU (sources: docs/whatif.md).

Dense (not 2:4-sparse) tensor throughput; HBM bandwidth and capacity; NVLink bandwidth per GPU as
NVIDIA states it (both directions together). A GPU without NVLink talks over PCIe.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from speclens.errors import ConfigError
from speclens.options import nearest, number

PCIE_GEN4_X16_GB_S = 64.0  # both directions together, as NVLink's figure is stated


@dataclass(frozen=True)
class Gpu:
    name: str
    bf16_tflops: float  # dense
    fp8_tflops: float | None  # dense; None: no FP8 tensor cores
    hbm_tb_s: float
    memory_gb: float
    nvlink_gb_s: float | None  # None: no NVLink (PCIe between GPUs)

    @property
    def link_gb_s(self) -> float:
        """What the GPU-to-GPU link carries, both directions together."""
        return self.nvlink_gb_s if self.nvlink_gb_s else PCIE_GEN4_X16_GB_S

    def peak_tflops(self, weights: str) -> float:
        if weights == "fp8":
            if self.fp8_tflops is None:
                raise ConfigError(f"gpu={self.name} has no FP8 tensor cores; use weights=bf16.")
            return self.fp8_tflops
        return self.bf16_tflops


GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        Gpu("h100_sxm", bf16_tflops=989.0, fp8_tflops=1979.0, hbm_tb_s=3.35, memory_gb=80.0, nvlink_gb_s=900.0),
        Gpu("h200_sxm", bf16_tflops=989.0, fp8_tflops=1979.0, hbm_tb_s=4.8, memory_gb=141.0, nvlink_gb_s=900.0),
        Gpu("b200", bf16_tflops=2250.0, fp8_tflops=4500.0, hbm_tb_s=8.0, memory_gb=180.0, nvlink_gb_s=1800.0),
        Gpu("gb200", bf16_tflops=2500.0, fp8_tflops=5000.0, hbm_tb_s=8.0, memory_gb=186.0, nvlink_gb_s=1800.0),
        Gpu("l40s", bf16_tflops=362.0, fp8_tflops=733.0, hbm_tb_s=0.864, memory_gb=48.0, nvlink_gb_s=None),
        Gpu("a100_sxm_80gb", bf16_tflops=312.0, fp8_tflops=None, hbm_tb_s=2.039, memory_gb=80.0, nvlink_gb_s=600.0),
    )
}

CUSTOM_FIELDS = ("bf16_tflops", "fp8_tflops", "hbm_tb_s", "memory_gb", "nvlink_gb_s")
CUSTOM_REQUIRED = ("bf16_tflops", "hbm_tb_s", "memory_gb")


def gpu_named(name: str, fields: dict[str, float] | None = None) -> Gpu:
    """A GPU of the table, or `custom` from its fields (gpu.<field>=…); fields given with a named
    GPU replace its datasheet figures."""
    fields = fields or {}
    unknown = sorted(set(fields) - set(CUSTOM_FIELDS))
    if unknown:
        raise ConfigError(
            f"gpu.{unknown[0]} is not a GPU figure{nearest(unknown[0], CUSTOM_FIELDS)} (any of {', '.join(CUSTOM_FIELDS)})."
        )
    fields = {key: None if value is None else number(value, f"gpu.{key}", above=0) for key, value in fields.items()}
    if name == "custom":
        missing = [f for f in CUSTOM_REQUIRED if fields.get(f) is None]
        if missing:
            raise ConfigError(
                f"gpu=custom needs {', '.join(f'gpu.{f}=…' for f in missing)} "
                f"(and may take gpu.fp8_tflops, gpu.nvlink_gb_s)."
            )
        return Gpu(
            "custom",
            bf16_tflops=fields["bf16_tflops"],
            fp8_tflops=fields.get("fp8_tflops"),
            hbm_tb_s=fields["hbm_tb_s"],
            memory_gb=fields["memory_gb"],
            nvlink_gb_s=fields.get("nvlink_gb_s"),
        )
    if name not in GPUS:
        raise ConfigError(f"gpu={name} is not in speclens's table; choose one of {', '.join(GPUS)} or gpu=custom.")
    return replace(GPUS[name], **fields) if fields else GPUS[name]


# torch.cuda.get_device_name's words for the GPUs of the table. The PCIe and NVL cards of a family
# (and GH200) have other clocks, bandwidth, memory or links than the table's figures: they match none.
DEVICE_NAMES: tuple[tuple[str, str], ...] = (
    ("GB200", "gb200"),
    ("B200", "b200"),
    ("H200", "h200_sxm"),
    ("H100 80GB HBM3", "h100_sxm"),
    ("H100 SXM", "h100_sxm"),
    ("L40S", "l40s"),
    ("A100-SXM4-80GB", "a100_sxm_80gb"),
)
OTHER_FORMS = ("PCIE", "NVL", "GH200")  # GH200: an H200-named Grace Hopper module of other memory


def gpu_for_device(device_name: str) -> str | None:
    """The table's GPU for a CUDA device name (e.g. "NVIDIA H100 80GB HBM3" → h100_sxm); None where
    the table holds no card of that form."""
    upper = device_name.upper()
    if any(form in upper for form in OTHER_FORMS):
        return None
    return next((gpu for words, gpu in DEVICE_NAMES if words.upper() in upper), None)
