"""Slash: shuffle-free stateful stream processing for PySpark.

Each executor updates a local partial state eagerly; partial states are CRDTs
merged lazily at epoch boundaries through ring channels written with one-sided
writes (after Slash, SIGMOD 2022).
"""
from __future__ import annotations

from slash import errors
from slash._core import Channel, Listener, Message, Transport, have_ofi

__version__ = "0.1.0"

__all__ = ["Channel", "Listener", "Message", "Transport", "errors", "have_ofi", "__version__"]
from slash.state import Aggregate, StateBackend, StateConfig  # noqa: E402
from slash.window import Session, Sliding, Tumbling, parse_window  # noqa: E402

__all__ += ["Aggregate", "StateBackend", "StateConfig", "Session", "Sliding", "Tumbling",
            "parse_window"]
