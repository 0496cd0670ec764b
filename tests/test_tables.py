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
        assert part.title == f"title ({n + 1} of {len(parts)})"
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
