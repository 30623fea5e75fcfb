"""The sources a Spark stream reads besides a :class:`slash.kafka.KafkaStream`,
:class:`RateSource` and :class:`DirectorySource`: they live in
:mod:`slash.sources.streams` (one package for every source); this name stays."""
from slash.sources.streams import DirectorySource, RateSource

__all__ = ["DirectorySource", "RateSource"]
