"""Build of the `slash._core` extension: the C core plus the Cython bindings.

The C sources are compiled straight into the extension (no separate shared
library to find at run time). libfabric is optional: when its headers and
library are present the `ofi` transport is compiled in (SLASH_HAVE_OFI) and
libfabric is loaded with dlopen at its first use (a process that only uses shm
never pays the ~0.2 s of loading it and the provider libraries it pulls in);
otherwise the package still builds and asking for "ofi:*" raises an error
that names the package to install. SLASH_NO_OFI=1 forces a build without it.
librdkafka is optional likewise: with its headers the core's Kafka reader
and paced producer (kafka_fetch.c, kafka_produce.c, SLASH_HAVE_RDKAFKA) are
linked in; without them topics are read and the benchmark's topics fed
through confluent-kafka's own client. SLASH_NO_RDKAFKA=1 forces that. SLASH_OPT sets the optimization flag (default
-O3; the ASan build of scripts/asan-pytest.sh compiles at -O1, 2.3x sooner).
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def links(program: str, lib: str) -> bool:
    """Whether a C program (a header's use) compiles and links with -l<lib>."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        return False
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "t.c")
        with open(src, "w") as f:
            f.write(program)
        r = subprocess.run([cc, src, "-o", os.path.join(d, "t"), f"-l{lib}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return r.returncode == 0


def have_libfabric() -> bool:
    if os.environ.get("SLASH_NO_OFI") == "1":
        return False
    return links("#include <rdma/fabric.h>\nint main(void){return (int)fi_version();}\n",
                 "fabric")


def have_librdkafka() -> bool:
    if os.environ.get("SLASH_NO_RDKAFKA") == "1":
        return False
    return links("#include <librdkafka/rdkafka.h>\n"
                 "int main(void){return rd_kafka_version() > 0 ? 0 : 1;}\n", "rdkafka")


def public_symbols() -> list:
    """Names of the public C API: the slash_* functions declared in the public
    headers (src/slashcore/include/slash/*.h)."""
    names = set()
    for h in sorted(glob.glob(os.path.join(HERE, "src/slashcore/include/slash/*.h"))):
        with open(h) as f:
            names |= set(re.findall(r"\b(slash_\w+)\s*\(", f.read()))
    return sorted(names)


def export_map() -> str:
    """Writes a linker version script that exports only PyInit__core and the
    public C API; every other symbol of the core (ssb_*, join_*, the
    transports' internals) stays local to the extension. Returns its path."""
    path = os.path.join(HERE, "build", "slash_exports.map")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    body = "".join(f"    {n};\n" for n in ["PyInit__core"] + public_symbols())
    text = "{\n  global:\n" + body + "  local: *;\n};\n"
    old = open(path).read() if os.path.exists(path) else None
    if old != text:
        with open(path, "w") as f:
            f.write(text)
    return path


def extensions():
    from Cython.Build import cythonize

    sources = ["bindings/_core.pyx"] + sorted(glob.glob("src/slashcore/*.c"))
    macros = []
    libs = ["m"]
    if have_libfabric():
        macros.append(("SLASH_HAVE_OFI", "1"))
        libs.append("dl")  # libfabric itself is dlopen()ed at the first ofi transport
        print("slash: libfabric found, building the ofi transport", file=sys.stderr)
    else:
        print("slash: libfabric not found, building without the ofi transport "
              "(apt-get install libfabric-dev to add it)", file=sys.stderr)
    if have_librdkafka():
        macros.append(("SLASH_HAVE_RDKAFKA", "1"))
        libs.append("rdkafka")
        print("slash: librdkafka found, building the core's Kafka reader and producer",
              file=sys.stderr)
    else:
        print("slash: librdkafka not found, building without the core's Kafka reader (topics "
              "are read with confluent-kafka; apt-get install librdkafka-dev to add it)",
              file=sys.stderr)
    ext = Extension(
        "slash._core",
        sources=sources,
        include_dirs=["src/slashcore/include", "src/slashcore", "bindings"],
        define_macros=macros,
        libraries=libs,
        extra_compile_args=["-std=gnu11", os.environ.get("SLASH_OPT", "-O3"), "-Wall", "-Wextra", "-Wno-unused-function",
                            "-Wno-unused-parameter", "-fno-strict-aliasing"],
        extra_link_args=[f"-Wl,--version-script={export_map()}"],
    )
    return cythonize([ext], language_level=3, include_path=["bindings"],
                     compiler_directives={"embedsignature": True})


class ParallelBuildExt(build_ext):
    """Compiles the extension's sources on every core (setuptools compiles one
    extension's sources one after another): the largest, the Cython module,
    first, so the rest compile beside it. SLASH_BUILD_JOBS sets the count."""

    def build_extension(self, ext):
        cc = self.compiler
        jobs = int(os.environ.get("SLASH_BUILD_JOBS", len(os.sched_getaffinity(0))))

        def compile(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                    extra_preargs=None, extra_postargs=None, depends=None):
            macros, objects, extra_postargs, pp_opts, build = cc._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs)
            cc_args = cc._get_cc_args(pp_opts, debug, extra_preargs)
            todo = sorted((o for o in objects if o in build),
                          key=lambda o: -os.path.getsize(build[o][0]))
            with ThreadPoolExecutor(max(1, jobs)) as pool:
                for done in [pool.submit(cc._compile, o, *build[o], cc_args, extra_postargs,
                                         pp_opts) for o in todo]:
                    done.result()  # (a compiler error raised here)
            return objects

        cc.compile = compile
        super().build_extension(ext)


setup(ext_modules=extensions(), cmdclass={"build_ext": ParallelBuildExt})
