"""The bad-input table shared by the config and CLI tests: each fixture in ``tests/configs/`` and its message.

Each row is (file name, a substring the error message must contain). The substring names the field or the
place in the file, so a message that stopped saying what is wrong would fail the test.
"""

from __future__ import annotations

from pathlib import Path

CONFIGS = Path(__file__).parent / "configs"

BAD_CONFIGS: list[tuple[str, str]] = [
    ("bad-missing-file.yaml", "does not exist"),  # deliberately not in tests/configs/
    ("bad-yaml-syntax.yaml", "YAML syntax error at line 3, column 6: expected ',' or '}', but got ':'; fix the file "
     "there (the layout is in pipeplan's README, 'Config reference'"),
    ("bad-wrong-type-count.yaml", "pipeline.num_stages must be a whole number >= 1, got 'eight'"),
    ("bad-wrong-type-cost.yaml", "costs.forward must be a finite number or a list of finite numbers, got 'fast'"),
    ("bad-fractional-count.yaml", "pipeline.num_microbatches must be a whole number >= 1, got 8.5"),
    ("bad-decimal-point-count.yaml", "pipeline.num_stages must be a whole number >= 1 without a decimal point, got "
     "4.0; write 4"),
    ("bad-inf-cost.yaml", "costs.forward must be a finite number or a list of finite numbers, got inf"),
    ("bad-nan-cost.yaml", "costs.backward must be a finite number or a list of finite numbers, got nan"),
    ("bad-negative-cost.yaml", "costs.comm must be >= 0, got -0.5"),
    ("bad-zero-count.yaml", "pipeline.num_microbatches must be >= 1, got 0"),
    ("bad-negative-count.yaml", "pipeline.num_stages must be >= 1, got -2"),
    ("bad-negative-budget.yaml", "memory.budget must be positive, got -3 (the activation memory a device may hold; "
     "leave memory.budget out for no limit)"),
    ("bad-missing-count.yaml", "pipeline.num_microbatches is missing"),
    ("bad-list-length.yaml", "costs.forward has 3 values; give a single number or a list of 4 (one per device)"),
    ("bad-list-without-commas.yaml", "costs.forward has 1 value (it holds one text, '1 1 1 2': separate a list's "
     "numbers with commas)"),
    ("bad-numbers-without-brackets.yaml", "costs.forward must be a finite number or a list of finite numbers, got "
     "'1 1 1 2'; separate a list's numbers with commas, e.g. [1, 2]"),
    ("bad-weight-activation.yaml", "memory.weight_activation (1.5) is above memory.activation (1)"),
    ("bad-budget-below-activation.yaml", "memory.budget (1.5) on device 0 is below one activation (2)"),
    ("bad-empty.yaml", "the config file is empty; write a config there (the layout is in pipeplan's README"),
    ("bad-top-level-list.yaml", "the top level must be a mapping"),
    ("bad-unknown-top-key.yaml", "unknown top-level key 'cost' (did you mean 'costs'?); valid keys: name, "
     "pipeline, costs"),
    ("bad-study-as-config.yaml", "unknown top-level key 'model'; valid keys: name, pipeline, costs, memory, solver, "
     "units (this looks like a sizing study: run it with 'pipeplan size FILE')"),
    ("bad-unknown-nested-key.yaml", "unknown key costs.backwards (did you mean 'backward'?); valid keys in costs: "
     "forward, backward"),
    ("bad-duplicate-key.yaml", "line 4: key 'num_stages' is given twice"),
    ("bad-section-not-mapping.yaml", "costs must be a mapping of forward, backward"),
    ("bad-split-without-weight.yaml", "costs.backward_weight must be > 0 on every stage or 0 on every stage"),
    ("bad-solver-objective.yaml", "solver.objective must be one of makespan, stage_span, got 'throughput'"),
    ("bad-list-as-key.yaml", "line 3: a list is used as a key; keys are names such as num_stages"),
    ("bad-alias-bomb.yaml", "the file holds more than 20000 values (each use of an alias"),
    ("bad-recursive-alias.yaml", "line 3: alias *f is used inside the value it names; write that value out"),
    ("bad-nested-too-deep.yaml", "line 3: values are nested more than 20 levels deep"),
    ("bad-not-utf8.yaml", "byte 0xe9 at offset 9 (line 1) is not valid UTF-8; save the file as UTF-8"),
    ("bad-huge-whole-number.yaml", "costs.forward must be a finite number or a list of finite numbers, got a whole "
                                   "number with about 4000 digits, too large for a number"),
    ("bad-huge-cost.yaml", "costs.forward (1e+308) is above 1e+15; express it in a larger unit"),
    ("bad-huge-total.yaml", "one step's op times and latencies add up to 2.4e+15, above 1e+15"),
    ("bad-huge-activations.yaml", "every microbatch's activations on one device add up to 6.4e+15, above 1e+15"),
    ("bad-too-many-ops.yaml", "this pipeline has 16,000,000 ops per step (8 model stages x 1000000 microbatches x 2 "
                              "kinds); pipeplan replays at most 2,000,000: lower pipeline.num_microbatches to at most "
                              "125000"),
]

# Configs that load (so ``simulate`` runs them) but admit no schedule: ``solve`` exits 2 naming the smallest budget
# that would work. Each row is (file name, a substring of the message).
UNSOLVABLE_CONFIGS: list[tuple[str, str]] = [
    ("unsolvable-budget-below-chunks.yaml", "raise memory.budget to at least 1"),
]

GOOD_CONFIGS: list[Path] = [
    CONFIGS.parent.parent / "models" / "seed-8x64.yaml",
    CONFIGS / "good-minimal.yaml",
    CONFIGS / "good-per-stage-split.yaml",
    CONFIGS / "good-yaml-features.yaml",
    CONFIGS / "good-huge-budget.yaml",
]
