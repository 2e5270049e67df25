"""Hadoop-filesystem helpers: the same code reads local paths, file:, hdfs:, s3a: ... URIs and globs.

Everything goes through the JVM's `org.apache.hadoop.fs.FileSystem`, so whatever filesystem the
Spark installation is configured for works unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession


@dataclass(frozen=True)
class InputFile:
    uri: str  # normalised, see `norm_uri`
    size: int
    mtime: int  # milliseconds since the epoch, as Hadoop reports it


def norm_uri(uri: str) -> str:
    """One spelling per file: Hadoop says `file:/a`, Spark's metadata says `file:///a`."""
    if uri.startswith("file:"):
        return "file:/" + uri[len("file:"):].lstrip("/")
    return uri


def _path(spark: SparkSession, uri: str):
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path, path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def list_inputs(spark: SparkSession, patterns: list[str]) -> tuple[list[InputFile], list[str]]:
    """Expand globs (directories are listed recursively). Returns the files and the patterns that
    matched nothing."""
    found: dict[str, InputFile] = {}
    unmatched: list[str] = []
    for pattern in patterns:
        path, fs = _path(spark, pattern)
        statuses = fs.globStatus(path)
        if not statuses:
            unmatched.append(pattern)
            continue
        before = len(found)
        for status in statuses:
            if status.isDirectory():
                files = fs.listFiles(status.getPath(), True)
                while files.hasNext():
                    st = files.next()
                    name = st.getPath().getName()
                    if not name.startswith((".", "_")):
                        _add(found, st)
            else:
                _add(found, status)
        if len(found) == before:
            unmatched.append(pattern)
    return sorted(found.values(), key=lambda f: f.uri), unmatched


def _add(found: dict[str, InputFile], status) -> None:
    uri = norm_uri(status.getPath().toString())
    found[uri] = InputFile(uri, int(status.getLen()), int(status.getModificationTime()))


def exists(spark: SparkSession, uri: str) -> bool:
    path, fs = _path(spark, uri)
    return bool(fs.exists(path))


def read_text(spark: SparkSession, uri: str) -> str | None:
    path, fs = _path(spark, uri)
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        jvm = spark.sparkContext._jvm
        data = jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
    finally:
        stream.close()
    return bytes(data).decode("utf-8")


def write_text(spark: SparkSession, uri: str, text: str) -> None:
    """Write a whole file (via a temporary name and a rename, so readers never see half of it)."""
    path, fs = _path(spark, uri)
    jvm = spark.sparkContext._jvm
    tmp = jvm.org.apache.hadoop.fs.Path(uri + ".tmp")
    stream = fs.create(tmp, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()
    if fs.exists(path):
        fs.delete(path, False)
    fs.rename(tmp, path)


def single_file(spark: SparkSession, directory: str, suffix: str, target: str) -> None:
    """Move the one `part-*<suffix>` file Spark wrote into `directory` to `target`, drop the rest."""
    dpath, fs = _path(spark, directory)
    tpath, _ = _path(spark, target)
    parts = [s.getPath() for s in fs.listStatus(dpath) if s.getPath().getName().startswith("part-")
             and s.getPath().getName().endswith(suffix)]
    if len(parts) != 1:
        raise RuntimeError(f"expected one {suffix} part in {directory}, found {len(parts)}")
    if fs.exists(tpath):
        fs.delete(tpath, False)
    fs.rename(parts[0], tpath)
    fs.delete(dpath, True)


def delete(spark: SparkSession, uri: str) -> None:
    path, fs = _path(spark, uri)
    if fs.exists(path):
        fs.delete(path, True)


def move_partitions(spark: SparkSession, source: str, target: str) -> int:
    """Move the files of `source/day=*/` into `target/day=*/` (renames, no rewrite); returns how many."""
    spath, fs = _path(spark, source)
    jvm = spark.sparkContext._jvm
    moved = 0
    for part in fs.listStatus(spath):
        if not part.isDirectory():
            continue
        dest_dir = jvm.org.apache.hadoop.fs.Path(f"{target}/{part.getPath().getName()}")
        fs.mkdirs(dest_dir)
        for f in fs.listStatus(part.getPath()):
            name = f.getPath().getName()
            if name.startswith(("part-",)) and not name.startswith("."):
                if not fs.rename(f.getPath(), jvm.org.apache.hadoop.fs.Path(dest_dir, name)):
                    raise OSError(f"cannot move {f.getPath()} to {dest_dir}")
                moved += 1
    return moved
