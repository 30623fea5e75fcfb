"""The queries a run takes, in one place to import them from.

* :class:`Query` (:mod:`slash.agg_query`): a windowed aggregation;
* :class:`JoinQuery` (:mod:`slash.join_query`): a windowed or interval join;
* :class:`Filter` (:mod:`slash.filters`): a ``COLUMN OP VALUE`` predicate;
* :func:`one_batch` (:mod:`slash.columns`): a table as one record batch.

Each lives in its own module; this one only names them, so that
``from slash.query import Query, JoinQuery`` reads the same wherever a
query is built.
"""
from __future__ import annotations

from slash.agg_query import Query, check_time_zone
from slash.columns import one_batch
from slash.filters import Filter
from slash.join_query import MAX_STRING_BYTES, JoinQuery, payload_words

__all__ = ["Filter", "JoinQuery", "MAX_STRING_BYTES", "Query", "check_time_zone", "one_batch",
           "payload_words"]
