"""Prints the Maven properties (``-Dname=value``, one a line) that compile
spark_integration/pom.xml against the jars of the pyspark this interpreter
imports: their directory and the versions in their file names. Used by
scripts/install.sh build_jar; exits 1 when pyspark or a jar is missing.

    python3 spark_integration/pyspark_jars.py
"""
import os
import re
import sys


def version(names, prefix):
    """The version in the first file named PREFIX-VERSION.jar."""
    for f in names:
        m = re.fullmatch(re.escape(prefix) + r"-(\d[^-]*)\.jar", f)
        if m:
            return m.group(1)
    raise LookupError(f"no {prefix}-VERSION.jar")


def main():
    try:
        import pyspark
    except ImportError:
        return 1
    d = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    try:
        names = sorted(os.listdir(d))
        scala = next(m.group(1) for m in (re.fullmatch(r"spark-core_([\d.]+)-.*\.jar", f)
                                          for f in names) if m)
        props = {"pyspark.jars": d, "scala.binary.version": scala,
                 "spark.version": version(names, "spark-core_" + scala),
                 "scala.version": version(names, "scala-library"),
                 "arrow.version": version(names, "arrow-format"),
                 "flatbuffers.version": version(names, "flatbuffers-java"),
                 "kryo.version": version(names, "kryo-shaded")}
    except (OSError, StopIteration, LookupError) as e:
        print(f"pyspark's jars in {d}: {e or 'no spark-core jar'}", file=sys.stderr)
        return 1
    for k, v in props.items():
        print(f"-D{k}={v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
