"""Imported by the executor fork server of ``slash run`` (see
:func:`slash.launcher.use_forkserver`): loads what every executor process
would otherwise load at its start, once, before the executors are forked.

pyarrow imports pandas, when it is installed, at its first conversion of
Python or NumPy values (``pa.array``, ``pa.scalar``): ~0.2 s that each
executor would pay while reading its first row group.
"""
import pyarrow as pa

import slash.runner  # noqa: F401  (the executors' code, with numpy, pyarrow and the core)

pa.array([0])  # pyarrow's lazy pandas probe, done once here
