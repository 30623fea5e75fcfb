"""Slash: shuffle-free stateful stream processing for PySpark.

Each executor updates a local partial state eagerly; partial states are CRDTs
merged lazily at epoch boundaries through ring channels written with one-sided
writes (after Slash, SIGMOD 2022).
"""
from __future__ import annotations

from slash import errors
from slash._core import Channel, Listener, Message, Transport, have_ofi
from slash.executor import Executor, GroupConfig
from slash.join import JoinBackend, JoinConfig
from slash.state import Aggregate, StateBackend, StateConfig
from slash.window import Session, Sliding, Tumbling, parse_window

__version__ = "0.1.0"

__all__ = ["Aggregate", "Channel", "Executor", "GroupConfig", "Listener", "Message", "Session",
           "Sliding", "StateBackend", "StateConfig", "Transport", "Tumbling", "errors",
           "have_ofi", "parse_window", "__version__"]
__all__ += ["JoinBackend", "JoinConfig"]
