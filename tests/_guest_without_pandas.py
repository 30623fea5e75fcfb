"""A pytest plugin of scripts/verbs-tests.sh (``-p _guest_without_pandas``):
``import pandas`` fails in the test process, as where pandas is not installed.

pyarrow imports pandas, when it can, at its first conversion of a numpy array
(to ask whether it is a pandas object); under the soft-RoCE guest's software
CPU that import cost 75 s of the first case that built a table (2.3 s on the
host). None of the verbs cases the script selects by default uses pandas;
Spark's (test_spark.py) does, and the script leaves this plugin out when it
runs them. A case that needs pandas fails naming it, never passes without it.
"""
import sys


class _NoPandas:
    """A meta path finder that refuses pandas and its submodules."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by -p _guest_without_pandas: "
                                      f"scripts/verbs-tests.sh)", name=name)
        return None


if "pandas" not in sys.modules:
    sys.meta_path.insert(0, _NoPandas())
