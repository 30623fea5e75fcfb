# limits.pxi - the core's limits, declared once in its headers, for the Python
# layer to check configurations against (slash.limits) before any C call.

#: name -> value of each limit the core enforces
LIMITS = {
    "partitions": SLASH_MAX_PARTITIONS,     # key partitions per store / group
    "aggregates": SLASH_SSB_MAX_AGGS,       # core aggregates per state
    "key_bytes": SLASH_SSB_KEY_MAX,         # bytes of a string/binary/composite key
    "join_columns": SLASH_JOIN_MAX_COLS,    # payload columns per join side
    "join_key_bytes": SLASH_JOIN_KEY_MAX,   # bytes of a join's string/binary/composite key
    "executors": SLASH_GROUP_MAX,           # executors in one group
}
