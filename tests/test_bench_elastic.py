"""``slash bench elastic`` measures what it says: the moved partition's
bytes are what travelled (sent = received, about 1/P of the state), its
pause is the new leader's move_pause_ns, and the bench is discovered by
the CLI. A small state keeps it fast; the figures are in docs/elastic.md."""
from __future__ import annotations

from slash.bench import discover
from slash.bench.elastic import measure


def test_a_move_reports_the_moved_partitions_bytes_and_its_pause():
    r = measure(partitions=4, moved_mb=1, steps=8, move_at=4)
    assert r["moved_bytes"] == r["moved_bytes_out"] > 0
    # keys spread evenly: one of 4 partitions holds about a quarter of them
    assert 0.5e6 < r["moved_bytes"] < 2e6, r["moved_bytes"]
    assert r["move_pause_ms"] > 0 and r["unmoved_pause_ms"] >= 0
    assert r["steps_until_handed_over"] is not None and len(r["step_ms"]) == 8


def test_elastic_is_a_benchmark_of_the_cli():
    assert "elastic" in discover()
