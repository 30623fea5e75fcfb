# cython: language_level=3, boundscheck=False, wraparound=False
# _core.pyx - the one extension module of Slash. Each C object of the core has
# one Python-facing class, defined in the .pxi file of its concern; this file
# only includes them, so there is a single build shape: one module.
cimport cython

include "status.pxi"
include "transport.pxi"
include "channel.pxi"
include "ssb.pxi"
include "join.pxi"
include "exec.pxi"
include "gen.pxi"
include "limits.pxi"
include "sketch.pxi"
include "pq.pxi"
include "kafka.pxi"
