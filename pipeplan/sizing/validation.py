"""Published training runs and what the sizing model predicts for them: the README's validation table.

Each run is set up as published (model shape, GPU, parallel sizes, batch, recompute) and estimated with the
shipped hardware preset. Rows marked "calibration" set the preset's ``matmul_efficiency`` and
``memory_efficiency``; the "check" rows were not used to fit anything. The published step time is the one
the source prints, or, where it prints throughput, the step time that throughput implies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeplan.sizing.costs import model_flops_per_step
from pipeplan.sizing.estimate import estimate
from pipeplan.sizing.models import load_model
from pipeplan.sizing.setup import Setup

KORTHIKANTI = ("Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models, Tables 3 "
               "and 4 (Megatron-LM on Selene, A100 80GB, seq 2048, vocabulary 51200)")
LLAMA3 = ("Llama Team 2024, The Llama 3 Herd of Models, Table 4 (405B on H100 80GB, seq 8192, 16M tokens per "
          "step; Meta's own 4D-parallel trainer, not Megatron-LM)")


def _gpt(num_layers: int, hidden_size: int, heads: int) -> dict[str, Any]:
    return {"num_layers": num_layers, "hidden_size": hidden_size, "ffn_hidden_size": 4 * hidden_size,
            "num_attention_heads": heads, "vocab_size": 51200, "tied_embeddings": True}


@dataclass(frozen=True)
class Run:
    """One published training run and its published step time."""

    name: str
    role: str
    """'calibration' (used to fit the efficiencies) or 'check'."""
    source: str
    published_step_s: float | None
    """Seconds per optimizer step as published (None: derived from ``published_tflops_per_gpu``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Keywords of :func:`~pipeplan.sizing.estimate.estimate`."""
    published_tflops_per_gpu: float | None = None
    note: str = ""


def _korthikanti(name: str, model: dict[str, Any], pipeline: int, batch: int, microbatch: int, selective: bool,
                 step: float, role: str) -> Run:
    settings = {"model": model, "hardware": "a100-80gb", "tensor_parallel": 8, "pipeline_parallel": pipeline,
                "data_parallel": 1, "microbatch_size": microbatch, "global_batch_size": batch, "seq_len": 2048,
                "recompute": "selective" if selective else "full", "sequence_parallel": selective,
                "flash_attention": False, "distributed_optimizer": False, "schedule": "1f1b"}
    mode = "sequence parallel + selective recompute" if selective else "tensor parallel + full recompute"
    return Run(f"{name}, {mode}", role, KORTHIKANTI, step, settings)


def _llama3(data_parallel: int, tflops: float) -> Run:
    settings = {"model": "llama3.1-405b", "hardware": "h100-80gb", "tensor_parallel": 8, "pipeline_parallel": 16,
                "data_parallel": data_parallel, "microbatch_size": 1, "global_batch_size": 2048, "seq_len": 8192,
                "recompute": "selective", "sequence_parallel": True, "flash_attention": True,
                "distributed_optimizer": True, "schedule": "interleaved-1f1b", "num_chunks": 2, "balanced": True}
    return Run(f"Llama 3 405B, {8 * 16 * data_parallel} GPUs (TP 8, PP 16, DP {data_parallel})", "check", LLAMA3,
               None, settings, published_tflops_per_gpu=tflops,
               note="step time implied by the published TFLOP/s per GPU under Megatron-LM's FLOP count; schedule "
                    "modelled as interleaved 1F1B with 2 chunks, first and last stage one layer short")


RUNS: tuple[Run, ...] = (
    _korthikanti("22B", _gpt(48, 6144, 64), 1, 4, 4, True, 1.10, "calibration"),
    _korthikanti("175B", _gpt(96, 12288, 96), 8, 64, 1, True, 13.75, "check"),
    _korthikanti("530B", _gpt(105, 20480, 128), 35, 280, 1, True, 37.83, "check"),
    _korthikanti("1T", _gpt(128, 25600, 160), 64, 512, 1, True, 71.49, "calibration"),
    _korthikanti("22B", _gpt(48, 6144, 64), 1, 4, 4, False, 1.42, "check"),
    _korthikanti("175B", _gpt(96, 12288, 96), 8, 64, 1, False, 18.13, "check"),
    _korthikanti("530B", _gpt(105, 20480, 128), 35, 280, 1, False, 49.05, "check"),
    _korthikanti("1T", _gpt(128, 25600, 160), 64, 512, 1, False, 94.42, "check"),
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
            "run": run.name, "role": run.role, "gpu": run.settings["hardware"],
            "predicted_step_s": result["step_time_s"], "published_step_s": published,
            "error": result["step_time_s"] / published - 1.0, "predicted_mfu": result["mfu"],
            "predicted_memory_gib": result["memory_gib"], "fits": result["fits"], "source": run.source,
            "note": run.note,
        })
    return rows
