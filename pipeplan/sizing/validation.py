"""Published training runs and what the sizing model predicts for them: the README's two validation tables.

Step time (:data:`RUNS`, :func:`validation_rows`): each run is set up as published (model shape, GPU, parallel
sizes, batch, recompute) and estimated with the shipped hardware preset. Rows marked "calibration" set the
preset's ``matmul_efficiency`` and ``memory_efficiency``; the "check" rows were not used to fit anything. The
published step time is the one the source prints, or, where it prints throughput, the step time that
throughput implies.

Peak memory per GPU (:data:`MEMORY_RUNS`, :func:`memory_validation_rows`): the Zero Bubble paper's measured
peaks of Megatron-LM runs on A100 80GB, predicted as the worst device's static state + backward workspace +
replayed activation peak (``memory_gib`` of :func:`~pipeplan.sizing.estimate.estimate`, without the
hardware's reserve). No constant of the memory model is fitted; the "calibration" rows are the ones the one
unstated setting (the attention kernel) was read from, see :data:`ZERO_BUBBLE`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeplan.sizing.costs import model_flops_per_step
from pipeplan.sizing.estimate import estimate
from pipeplan.sizing.models import load_model
from pipeplan.sizing.setup import Setup

KORTHIKANTI = ("Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models, Tables 3 "
               "(setups) and 5 (iteration times): Megatron-LM on Selene, A100 80GB, seq 2048, vocabulary 51200, no "
               "data parallelism, interleaved 1F1B with 3 chunks per device for 175B and 530B")
LLAMA3 = ("Llama Team 2024, The Llama 3 Herd of Models, Table 4 (405B on H100 80GB, seq 8192, 16M tokens per "
          "step; Meta's own 4D-parallel trainer, not Megatron-LM)")
DGXC = ("NVIDIA DGX Cloud benchmarking recipes, github.com/NVIDIA/dgxc-benchmarking: NeMo on Megatron-Core, "
        "H100 80GB SXM, BF16, context parallel 1, 'Training step time (seconds per step)'")
"""Where the H100 Megatron-Core rows come from and what is assumed.

The result tables give the parallel sizes, microbatch, batch and step time; they do not state recompute or
sequence parallelism. The recipes' launch configurations in the same repository do: at commit
8f5cbb3799ea8cc031ed2c2cee1cbdbc15b240ad, which holds the same three tables with the same step times,
``nemo_megatron/gpt3_175b_hydra.yaml``, ``nemotron/nemotron4-15b-synth.yaml`` and
``nemotron/nemotron4-340b-synth.yaml`` set sequence parallelism on (``nemotron/configure.sh`` forces it on
too), no recompute for GPT-3 175B and Nemotron-4 15B and selective recompute for Nemotron-4 340B (with a fused
attention kernel, selective costs the same as none in this model: only the scores would be recomputed),
Transformer Engine with fused attention, and the distributed optimizer with the gradient sync overlapped. That
these files are the configuration behind the published step times is an assumption. The Nemotron-4 15B row
with TP 2 comes from the NeMo 2.0 version of the recipe (NeMo 25.04), whose configuration was not read:
sequence parallel on and no recompute are assumed for it. Not modelled: the recipes' overlap of tensor-parallel
collectives with GEMMs, bf16 gradient reduction, and the 340B recipe's bf16 optimizer state."""


def _gpt(num_layers: int, hidden_size: int, heads: int) -> dict[str, Any]:
    return {"num_layers": num_layers, "hidden_size": hidden_size, "ffn_hidden_size": 4 * hidden_size,
            "num_attention_heads": heads, "vocab_size": 51200, "tied_embeddings": True}


@dataclass(frozen=True)
class Run:
    """One published training run and its published step time."""

    name: str
    role: str
    """'calibration' (used to fit the efficiencies) or 'check'."""
    trainer: str
    """The training framework that ran it (the table groups rows by it)."""
    source: str
    published_step_s: float | None
    """Seconds per optimizer step as published (None: derived from ``published_tflops_per_gpu``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Keywords of :func:`~pipeplan.sizing.estimate.estimate`."""
    published_tflops_per_gpu: float | None = None
    note: str = ""


def _korthikanti(name: str, model: dict[str, Any], pipeline: int, batch: int, microbatch: int, selective: bool,
                 step: float, role: str, chunks: int = 1) -> Run:
    settings = {"model": model, "hardware": "a100-80gb", "tensor_parallel": 8, "pipeline_parallel": pipeline,
                "data_parallel": 1, "microbatch_size": microbatch, "global_batch_size": batch, "seq_len": 2048,
                "recompute": "selective" if selective else "full", "sequence_parallel": selective,
                "flash_attention": False, "distributed_optimizer": False,
                "schedule": "interleaved-1f1b" if chunks > 1 else "1f1b", "num_chunks": chunks}
    mode = "sequence parallel + selective recompute" if selective else "tensor parallel + full recompute"
    return Run(f"{name}, {mode}", role, "Megatron-LM", KORTHIKANTI, step, settings)


def _llama3(data_parallel: int, tflops: float) -> Run:
    settings = {"model": "llama3.1-405b", "hardware": "h100-80gb", "tensor_parallel": 8, "pipeline_parallel": 16,
                "data_parallel": data_parallel, "microbatch_size": 1, "global_batch_size": 2048, "seq_len": 8192,
                "recompute": "selective", "sequence_parallel": True, "flash_attention": True,
                "distributed_optimizer": True, "schedule": "interleaved-1f1b", "num_chunks": 2, "balanced": True}
    return Run(f"Llama 3 405B, {8 * 16 * data_parallel} GPUs (TP 8, PP 16, DP {data_parallel})", "check",
               "Meta's trainer", LLAMA3, None, settings, published_tflops_per_gpu=tflops,
               note="step time implied by the published TFLOP/s per GPU under Megatron-LM's FLOP count; schedule "
                    "modelled as interleaved 1F1B with 2 chunks, first and last stage one layer short")


def _dgxc(name: str, where: str, model: object, tensor: int, pipeline: int, chunks: int, num_gpus: int,
          microbatch: int, batch: int, seq_len: int, recompute: str, step: float, note: str = "") -> Run:
    data = num_gpus // (tensor * pipeline)
    settings = {"model": model, "hardware": "h100-80gb", "tensor_parallel": tensor, "pipeline_parallel": pipeline,
                "data_parallel": data, "microbatch_size": microbatch, "global_batch_size": batch,
                "seq_len": seq_len, "recompute": recompute, "sequence_parallel": True, "flash_attention": True,
                "distributed_optimizer": True, "schedule": "interleaved-1f1b" if chunks > 1 else "1f1b",
                "num_chunks": chunks}
    layout = f"TP {tensor}" + (f" PP {pipeline} ({chunks} chunks)" if pipeline > 1 else "") + f" DP {data}"
    return Run(f"{name}, {layout}, {num_gpus:,} GPUs", "check", "NeMo (Megatron-Core)", f"{DGXC}; {where}", step,
               settings, note=note)


GPT3_DGXC = "nemo_megatron/README_175b.md at commit 0b71cfda5163540778e2a3d2db59858bf62f96f7"
N340_DGXC = ("nemotron/README_340b.md at commit 143b90dd91f9be958fed4773ae95d941a3356a82 (recipe release 24.11, "
             "NeMo 24.09 container)")
N15_DGXC = "nemotron/README_15b.md at commit 0b71cfda5163540778e2a3d2db59858bf62f96f7"
N15_DGXC_2504 = "nemotron/README.md at commit 1f6d9f40e4117d7c71b726f86074ac01c29f87f5 (NeMo 25.04)"
ASSUMED = ("recompute and sequence parallelism are not in the result table: taken from the recipe's launch "
           "configuration (see DGXC)")

RUNS: tuple[Run, ...] = (
    _korthikanti("22B", _gpt(48, 6144, 64), 1, 4, 4, True, 1.10, "calibration"),
    _korthikanti("175B", _gpt(96, 12288, 96), 8, 64, 1, True, 13.75, "check", chunks=3),
    _korthikanti("530B", _gpt(105, 20480, 128), 35, 280, 1, True, 37.83, "check", chunks=3),
    _korthikanti("1T", _gpt(128, 25600, 160), 64, 512, 1, True, 71.49, "calibration"),
    _korthikanti("22B", _gpt(48, 6144, 64), 1, 4, 4, False, 1.42, "check"),
    _korthikanti("175B", _gpt(96, 12288, 96), 8, 64, 1, False, 18.13, "check", chunks=3),
    _korthikanti("530B", _gpt(105, 20480, 128), 35, 280, 1, False, 49.05, "check", chunks=3),
    _korthikanti("1T", _gpt(128, 25600, 160), 64, 512, 1, False, 94.42, "check"),
    # GPT-3 175B: GBS = 2 x GPUs, 64 microbatches per pipeline.
    *(_dgxc("GPT-3 175B", GPT3_DGXC, _gpt(96, 12288, 96), 4, 8, 12, gpus, 1, 2 * gpus, 2048, "none", step,
            ASSUMED)
      for gpus, step in zip((128, 256, 512, 1024, 2048), (8.309, 8.408, 8.42, 8.453, 8.49))),
    # Nemotron-4 340B: 16 microbatches per pipeline (GBS = 16 x DP).
    *(_dgxc("Nemotron-4 340B", N340_DGXC, "nemotron-4-340b", 8, 8, 12, gpus, 1, 16 * gpus // 64, 4096,
            "selective", step, ASSUMED)
      for gpus, step in zip((128, 256, 512, 1024, 2048), (4.61, 4.67, 4.7, 4.73, 4.84))),
    # Nemotron-4 15B: microbatch 4, 4 microbatches per replica (GBS = 4 x GPUs).
    *(_dgxc("Nemotron-4 15B", N15_DGXC, "nemotron-4-15b", 4, 1, 1, gpus, 4, 4 * gpus, 4096, "none", step, ASSUMED)
      for gpus, step in zip((16, 32, 64, 128, 256, 512, 1024, 2048),
                            (2.812, 2.824, 2.845, 2.859, 2.852, 2.875, 2.895, 2.887))),
    _dgxc("Nemotron-4 15B (NeMo 25.04)", N15_DGXC_2504, "nemotron-4-15b", 2, 1, 1, 16, 2, 64, 4096, "none", 2.746,
          "recompute and sequence parallelism assumed (the NeMo 2.0 recipe's configuration was not read)"),
    _llama3(64, 430.0),
    _llama3(128, 400.0),
)


def published_step(run: Run) -> float:
    """The run's published step time in seconds (derived from its TFLOP/s per GPU when that is what it gives)."""
    if run.published_step_s is not None:
        return run.published_step_s
    assert run.published_tflops_per_gpu is not None
    s = run.settings
    setup = Setup(tensor_parallel=s["tensor_parallel"], pipeline_parallel=s["pipeline_parallel"],
                  data_parallel=s["data_parallel"], microbatch_size=s["microbatch_size"],
                  global_batch_size=s["global_batch_size"], seq_len=s["seq_len"])
    flops = model_flops_per_step(load_model(s["model"]), setup)
    return flops / (setup.num_gpus * run.published_tflops_per_gpu * 1e12)


def validation_rows() -> list[dict[str, Any]]:
    """One record per published run: predicted and published step time, the error, MFU and memory."""
    rows = []
    for run in RUNS:
        result = estimate(**run.settings)
        published = published_step(run)
        rows.append({
            "run": run.name, "role": run.role, "trainer": run.trainer, "gpu": run.settings["hardware"],
            "predicted_step_s": result["step_time_s"], "published_step_s": published,
            "error": result["step_time_s"] / published - 1.0, "predicted_mfu": result["mfu"],
            "predicted_memory_gib": result["memory_gib"], "fits": result["fits"], "source": run.source,
            "note": run.note,
        })
    return rows


ZERO_BUBBLE = ("Qi et al. 2024, Zero Bubble Pipeline Parallelism (ICLR 2024, arXiv 2401.10241): GPT-3-like models "
               "of Table 3 on A100 SXM 80GB, Megatron-LM fork, pipeline parallelism only (GPUs = stages), seq 1024, "
               "first and last stage one layer short")
"""Where the numbers come from and what is assumed.

Verified with a code search (not re-read from the PDF): Tables 3, 4, 6, 11 and 12 as a Markdown transcription of
the arXiv paper kept in a public repository gives them; Table 4's memory rows are the same in a second
transcription, and its 1F1B and ZB-2p rows in a third. Unstated in the paper and assumed here: the MLP width (4h,
as GPT-3), the vocabulary (GPT-2 BPE, 50257 tokens, padded by Megatron-LM to 50304; embeddings tied, the
Megatron-LM default), no recomputation, no fused (flash) attention kernel, 18 bytes of static state per parameter
(the authors' public scripts default to fp16, whose fp16 gradients would make it 16 and lower these predictions
by 2 bytes per parameter) and "GB" read as GiB (Megatron-LM's ``report_memory`` divides by 2**20 and prints MB).
The attention kernel was read from the calibration rows (Table 12, 1F1B): their growth per in-flight microbatch
(2.75 to 3.5 GB for the 1.5B model) matches the stored attention scores (5as bytes per token) and is 2.5 to 3.5
times what a fused kernel would keep. ZB-1p is modelled as ZB-H1 (the paper's Table 5 gives them the same bubble
rate in every setting: the same schedule), ZB-2p as ZB-H2 (at most 2p - 1 microbatches of activations where
ZB-2p's limit is 2p, so ZB-2p rows are expected a little low). The score backward's workspace in
:mod:`pipeplan.sizing.memory` was added after every row's error had been seen (it has no free constant)."""

ZB_MODELS: dict[str, tuple[int, int, int]] = {
    "1.5B": (22, 2304, 24), "6.2B": (30, 4096, 32), "14.6B": (46, 5120, 40), "28.3B": (62, 6144, 48),
}
"""The Zero Bubble paper's Table 3, keyed by model name: (layers, hidden size, attention heads)."""

ZB_SCHEDULES = {"1F1B": "1f1b", "ZB-1p": "zb-h1", "ZB-2p": "zb-h2"}
"""The paper's schedule names and the registered schedule each is replayed as (see :data:`ZERO_BUBBLE`)."""


@dataclass(frozen=True)
class MemoryRun:
    """One published training run and its published peak memory per GPU."""

    name: str
    role: str
    """'calibration' (the unstated attention kernel was read from it) or 'check'."""
    source: str
    published_gib: float
    """Peak memory per GPU as published, GiB."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Keywords of :func:`~pipeplan.sizing.estimate.estimate`."""
    note: str = ""


def _zero_bubble(table: str, model: str, pipeline: int, microbatch: int, num_microbatches: int, schedule: str,
                 published_gib: float, role: str = "check") -> MemoryRun:
    layers, hidden, heads = ZB_MODELS[model]
    middle = (layers + 2) // pipeline
    split = [middle - 1] + [middle] * (pipeline - 2) + [middle - 1]
    settings = {"model": {"num_layers": layers, "hidden_size": hidden, "ffn_hidden_size": 4 * hidden,
                          "num_attention_heads": heads, "vocab_size": 50304, "tied_embeddings": True},
                "hardware": "a100-80gb", "tensor_parallel": 1, "pipeline_parallel": pipeline, "data_parallel": 1,
                "microbatch_size": microbatch, "global_batch_size": microbatch * num_microbatches,
                "seq_len": 1024, "recompute": "none", "sequence_parallel": False, "flash_attention": False,
                "distributed_optimizer": False, "schedule": ZB_SCHEDULES[schedule], "layers_per_stage": split}
    name = f"{model} {schedule}, PP {pipeline}, microbatch {microbatch} x {num_microbatches}"
    return MemoryRun(name, role, f"{ZERO_BUBBLE}; {table}", published_gib, settings)


def _table12(model: str, pipeline: int, microbatch: int, counts: tuple[int, int, int], schedule: str,
             published: tuple[float, float, float], role: str) -> list[MemoryRun]:
    return [_zero_bubble("Table 12", model, pipeline, microbatch, m, schedule, gib, role)
            for m, gib in zip(counts, published)]


MEMORY_RUNS: tuple[MemoryRun, ...] = (
    # Table 12: few microbatches (m <= p), so the peak grows with m; 1F1B rows calibrate, ZB-2p rows check.
    *_table12("1.5B", 8, 6, (2, 4, 8), "1F1B", (11, 18, 29), "calibration"),
    *_table12("6.2B", 8, 3, (2, 4, 8), "1F1B", (21, 28, 39), "calibration"),
    *_table12("14.6B", 16, 1, (4, 8, 16), "1F1B", (19, 24, 32), "calibration"),
    *_table12("1.5B", 8, 6, (2, 4, 8), "ZB-2p", (12, 19, 34), "check"),
    *_table12("6.2B", 8, 3, (2, 4, 8), "ZB-2p", (21, 29, 44), "check"),
    *_table12("14.6B", 16, 1, (4, 8, 16), "ZB-2p", (20, 24, 33), "check"),
    # Table 4 (setups of Table 3; the peak is the same for 24/32/64 microbatches, the smallest count is used).
    *(_zero_bubble("Table 4", model, p, b, m, schedule, gib)
      for schedule, peaks in (("1F1B", (30, 39, 32, 43)), ("ZB-1p", (32, 42, 33, 44)), ("ZB-2p", (59, 70, 51, 74)))
      for (model, p, b, m), gib in zip((("1.5B", 8, 6, 24), ("6.2B", 8, 3, 24), ("14.6B", 16, 1, 48),
                                        ("28.3B", 32, 1, 96)), peaks)),
    # Table 11: 1F1B and ZB-1p with the microbatch doubled.
    *(_zero_bubble("Table 11", model, p, b, m, schedule, gib)
      for schedule, peaks in (("1F1B", (57, 66, 50, 72)), ("ZB-1p", (61, 71, 51, 74)))
      for (model, p, b, m), gib in zip((("1.5B", 8, 12, 24), ("6.2B", 8, 6, 24), ("14.6B", 16, 2, 48),
                                        ("28.3B", 32, 2, 96)), peaks)),
    # Table 6: deeper pipelines (16, 24, 32 stages), same layer counts.
    *(_zero_bubble("Table 6", model, p, b, m, schedule, gib)
      for schedule, peaks in (("1F1B", (61, 44, 69)), ("ZB-1p", (62, 46, 73)))
      for (model, p, b, m), gib in zip((("6.2B", 16, 6, 48), ("14.6B", 24, 2, 72), ("28.3B", 32, 2, 96)), peaks)),
)


def memory_validation_rows() -> list[dict[str, Any]]:
    """One record per published run: predicted and published peak memory per GPU (GiB) and the error."""
    rows = []
    for run in MEMORY_RUNS:
        result = estimate(**run.settings)
        rows.append({
            "run": run.name, "role": run.role, "gpu": run.settings["hardware"],
            "schedule": run.settings["schedule"], "predicted_memory_gib": result["memory_gib"],
            "published_memory_gib": run.published_gib, "error": result["memory_gib"] / run.published_gib - 1.0,
            "predicted_static_gib": result["static_memory_gib"],
            "predicted_activation_gib": result["activation_memory_gib"], "source": run.source, "note": run.note,
        })
    return rows
