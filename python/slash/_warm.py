"""Imported by the executor fork server of ``slash run`` (see
:func:`slash.run.launcher.use_forkserver`): loads what every executor process
would otherwise load at its start, once, before the executors are forked:
numpy, pyarrow (its compute kernels and Parquet reader) and the core.

Not pandas: an executor builds its Arrow values from buffers
(:mod:`slash.arrow_np`), so pyarrow never probes for it there, and the
server does not pay its import (0.3-0.5 s of a core) on every run.
"""
import pyarrow.compute  # noqa: F401
import pyarrow.parquet  # noqa: F401

import slash.runner  # noqa: F401  (the executors' code, with numpy, pyarrow and the core)
