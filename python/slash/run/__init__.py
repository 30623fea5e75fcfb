"""The run layer: what every entry point (``runner.run``, ``slash run``,
``slash.spark``) shares to execute a query, below the drivers."""
