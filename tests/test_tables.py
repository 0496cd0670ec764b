"""Terminal tables that fit the terminal: :func:`pipeplan.report.tables.fitted_tables` splits a table too wide
for the width into parts that repeat the identifying columns, and no cell is ever cut short."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table

from pipeplan.report.tables import Column, fitted_tables


def drawn(table: Table, width: int) -> str:
    out = io.StringIO()
    Console(width=width, file=out, color_system=None, highlight=False).print(table, crop=False)
    return out.getvalue()


def header_words(table: Table) -> list[str]:
    return [str(column.header) for column in table.columns]


WORDS = st.text(alphabet="abcdefghij-.()%", min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    headers=st.lists(WORDS, min_size=1, max_size=12, unique=True),
    rows=st.integers(min_value=1, max_value=4),
    width=st.integers(min_value=40, max_value=200),
    keep=st.integers(min_value=0, max_value=2),
    data=st.data(),
)
def test_parts_cover_every_column_once_and_fit_when_one_column_does(headers: list[str], rows: int, width: int,
                                                                     keep: int, data: st.DataObject) -> None:
    keep = min(keep, len(headers) - 1)
    body = [[data.draw(WORDS) for _ in headers] for _ in range(rows)]
    parts = fitted_tables("title", [Column(h) for h in headers], body, width, keep=keep)
    if len(parts) == 1:
        assert header_words(parts[0]) == headers
        assert "…" not in drawn(parts[0], width)
        return
    kept = headers[:keep] if keep else ["#"]
    others: list[str] = []
    for n, part in enumerate(parts):
        names = header_words(part)
        assert names[:len(kept)] == kept  # every part identifies its rows the same way
        others += names[len(kept):]
        assert part.title == f"({n + 1} of {len(parts)}) title"
        text = drawn(part, width)
        single = len(names) == len(kept) + 1
        if not single:  # a part of more than one column beyond the kept ones is only made when it fits
            assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
        for row in body:
            for header in names[len(kept):]:
                assert row[headers.index(header)] in text  # a cell is printed whole, on one line
    assert others == headers[keep:]


def test_an_order_puts_chosen_columns_first_and_the_caption_goes_last() -> None:
    headers = ["key", "a", "b", "c", "d"]
    body = [["k1", "1" * 30, "2" * 30, "3" * 30, "4" * 30]]
    parts = fitted_tables("t", [Column(h) for h in headers], body, 80, keep=1, order=[4, 3, 1, 2], caption="note")
    assert [header_words(p)[1:] for p in parts] == [["d", "c"], ["a", "b"]]
    assert [p.caption for p in parts] == [None, "note"]
    whole = fitted_tables("t", [Column(h) for h in headers], body, 200, keep=1, caption="note")
    assert len(whole) == 1 and header_words(whole[0]) == headers and whole[0].caption == "note"


def test_small_times_and_memory_in_bytes_read_as_numbers() -> None:
    """Times in seconds of a small model rounded to 0.0 at three decimals beside the optimizer's 3.3e-08, and
    memory in bytes printed as 1.28849e+10: small times keep their significant digits, large memory is whole with
    thousands separators, in the cells and in the budget."""
    from pipeplan.config import Units
    from pipeplan.report.tables import metrics_table

    metrics = {"schedule": "1f1b", "feasible": True, "makespan": 3.3e-08, "stage_span": 2.96e-02, "utilization": 0.5,
               "bubble": 0.5, "peak_memory": 12_884_901_888.0, "peak_memory_per_device": [12_884_901_888.0, 44.1406],
               "busy_per_device": [0.0296, 213.0], "flushes": 1}
    text = drawn(metrics_table("t", metrics, Units(time="s", memory="bytes"), [6.5e10, 6.5e10]), 200)
    for shown in ("3.3e-08", "0.0296", "12,884,901,888 44.1406", "0.0296 213.0", "65,000,000,000"):
        assert shown in text, text
    assert "e+10" not in text and " 0.0 " not in text


def test_times_have_the_optimizer_lines_six_significant_digits() -> None:
    """Times in seconds at three significant digits made close schedules look tied or out of order (0.0992 and
    0.0988, 0.145) where the optimizer's line and report.html give 0.09924, 0.09877 and 0.14489."""
    from pipeplan.config import Units
    from pipeplan.frontier import FrontierRow
    from pipeplan.report.tables import comparison_table, frontier_tables

    def row(name: str, makespan: float) -> dict[str, object]:
        return {"schedule": name, "makespan": makespan, "stage_span": makespan, "bubble": 0.1, "peak_memory": 5,
                "feasible": True}

    summary = {"name": "s", "num_stages": 4, "num_microbatches": 8, "memory_budget": None, "objective": "makespan",
               "chosen": "zb-h1", "schedules": [row("1f1b", 0.14489), row("zb-h1", 0.09877), row("gpipe", 0.09924)]}
    text = "".join(drawn(table, 200) for table in comparison_table(summary, Units(time="s")))
    for shown in ("0.14489", "0.09877", "0.09924"):
        assert shown in text, text
    measures = {"makespan": None, "stage_span": None, "utilization": None, "peak_memory": None}
    rows = [FrontierRow(budget=5, schedule="1f1b", objective=0.14489, feasible=True, **measures),
            FrontierRow(budget=5, schedule="optimal", objective=0.0987654321, feasible=True, lower_bound=0.0987,
                        gap=0.0007, status="FEASIBLE", **measures)]
    text = "".join(drawn(table, 200) for table in frontier_tables("s", rows, "makespan", Units(time="s")))
    assert "0.14489" in text and "0.0987654" in text and "0.0987 " in text, text
    # Whole and short times read as before: one decimal at least, no trailing zeros, thousands separated.
    summary["schedules"] = [row("1f1b", 213.0), row("zb-h1", 87.21000000000001), row("gpipe", 12345.67)]
    text = "".join(drawn(table, 200) for table in comparison_table(summary, Units(time="s")))
    for shown in (" 213.0 ", " 87.21 ", " 12,345.7 "):
        assert shown in text, text


def test_a_small_models_step_time_and_memory_are_not_zero_in_the_sizing_table() -> None:
    import pandas as pd

    from pipeplan.report.sizing import TOP_COLUMNS, top_table

    row = {column: 1 for column, _, _ in TOP_COLUMNS} | {"recompute": "selective", "schedule": "1f1b",
                                                         "tokens_per_s": 5e6, "mfu": 0.01, "bubble": 0.2,
                                                         "step_time_s": 0.00123, "memory_gib": 0.149, "fits": True}
    text = "".join(drawn(table, 200) for table in top_table("t", pd.DataFrame([row]), 1))
    assert "0.00123" in text and "0.149" in text and "0.00 " not in text, text
    row |= {"step_time_s": 12.3456, "memory_gib": 45.31}  # as before: two and one decimals
    text = "".join(drawn(table, 200) for table in top_table("t", pd.DataFrame([row]), 1))
    assert "12.35" in text and "45.3" in text, text


def test_a_narrow_part_keeps_its_title_on_few_lines() -> None:
    """A part of one narrow column beside the kept one was as narrow as its cells, and its title wrapped a word or
    two a line (six lines at 60 columns); a part is now as wide as its title's longest line, within the width."""
    title = "split-8x32: 8 stages x 32 microbatches, budget 12 activations"
    headers = ["schedule", "makespan", "span", "bubble", "peak", "fits", "proof"]
    body = [["* optimal", "87.21", "86.36", "8.3 %", "12", "yes", "optimal"]]
    parts = fitted_tables(title, [Column(h) for h in headers], body, 60, keep=1)
    assert len(parts) == 2 and header_words(parts[1]) == ["schedule", "proof"]
    text = drawn(parts[1], 60)
    title_lines = text[:text.index("┏")].strip("\n").splitlines()
    assert len(title_lines) <= 2 and title_lines[0].strip().startswith("(2 of 2) split-8x32"), text
    # The same for a narrow table that fits whole.
    [whole] = fitted_tables(title, [Column("schedule"), Column("proof")], [["* optimal", "optimal"]], 80)
    text = drawn(whole, 80)
    assert len(text[:text.index("┏")].strip("\n").splitlines()) == 1, text


def test_a_schedule_over_a_per_device_budget_names_the_devices() -> None:
    """With budgets 6 5 4 3 3 3 the table's peak (the largest device's, 6) fits the largest budget, yet "fits NO":
    a line under the table says where."""
    from pipeplan.config import Units
    from pipeplan.report.tables import over_budget_notes

    def row(name: str, feasible: bool, peaks: list[float]) -> dict[str, object]:
        return {"schedule": name, "feasible": feasible, "peak_memory_per_device": peaks}

    summary = {"memory_budget": [6, 5, 4, 3, 3, 3],
               "schedules": [row("1f1b", True, [6, 5, 4, 3, 2, 1]),
                             row("zb-h1", False, [6, 5.35, 4.7, 4.05, 3.4, 2.75]),
                             row("zb-h2", False, [11, 5, 4, 3, 3, 3.5])]}
    units = Units(time="ms", memory="GiB")
    assert over_budget_notes(summary, units) == [
        "zb-h1 is over the budget on devices 1 (5.35 against 5), 2 (4.7 against 4), 3 (4.05 against 3) and 1 more "
        "(in GiB)",
        "zb-h2 is over the budget on devices 0 (11 against 6), 5 (3.5 against 3) (in GiB)"]
    assert over_budget_notes({**summary, "memory_budget": 6}, units) == []  # one budget: the peak column says it


def test_the_solve_table_counts_one_stage_or_microbatch_in_the_singular() -> None:
    """The header read "1 stages x 5 microbatches" and "4 stages x 1 microbatches"."""
    from pipeplan.config import Units
    from pipeplan.report.tables import comparison_table

    row = {"schedule": "gpipe", "makespan": 15.0, "stage_span": 15.0, "bubble": 0.0, "peak_memory": 5,
           "feasible": True}
    summary = {"name": "one", "num_stages": 1, "num_microbatches": 5, "num_chunks": 1, "memory_budget": None,
               "objective": "makespan", "chosen": "gpipe", "schedules": [row]}
    titles = [str(comparison_table(summary | shape, Units())[0].title).splitlines()[0]
              for shape in ({}, {"num_stages": 4, "num_microbatches": 1}, {"num_stages": 4, "num_chunks": 2})]
    assert titles == ["one: 1 stage x 5 microbatches, no memory budget",
                      "one: 4 stages x 1 microbatch, no memory budget",
                      "one: 4 stages x 5 microbatches x 2 chunks, no memory budget"]
