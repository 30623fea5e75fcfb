"""The execution engine, bottom up: what every driver (local processes,
checkpointed, live-scaled, Spark) and every rank loop share. Modules here
import nothing above them: not :mod:`slash.runner`, :mod:`slash.control.autotune`,
:mod:`slash.spark`, :mod:`slash.cli` or :mod:`slash.bench`
(``tests/test_layers.py`` checks it; ``docs/architecture.md`` draws the layers)."""
