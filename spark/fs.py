"""Filesystem helpers: the same code reads local paths, file:, hdfs:, s3a: ... URIs and globs.

With a JVM in this process (local mode, spark-submit) everything goes through the JVM's
`org.apache.hadoop.fs.FileSystem`, so whatever filesystem the Spark installation is configured for works
unchanged. A Spark Connect session has no JVM here: the input files are listed by the server (a
`binaryFile` scan, which reads no content), and the few small files and renames of --out are done by
this process on storage it shares with the server (the same machine, or a mount at the same path).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from urllib.parse import unquote

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


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


def source_uri(scanned: str) -> str:
    """A file as `list_inputs` names it, from the name a scan reports (`_metadata.file_path`): that one is
    percent-encoded (a space is `%20`, a `%` is `%25`; a `+` stays itself)."""
    return norm_uri(unquote(scanned))


def is_connect(spark: SparkSession) -> bool:
    """A Spark Connect session: the JVM is the server's, out of this process's reach."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def local_path(uri: str) -> str:
    """A path this process opens itself (Spark Connect): plain paths and file: URIs only."""
    if uri.startswith("file:"):
        return "/" + uri[len("file:"):].lstrip("/")
    if ":" in uri.split("/", 1)[0]:  # hdfs:, s3a: ...
        raise ValueError(f"{uri}: with Spark Connect, --out must be a local path the server shares")
    return uri


def _path(spark: SparkSession, uri: str):
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path, path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def list_inputs(spark: SparkSession, patterns: list[str]) -> tuple[list[InputFile], list[str]]:
    """Expand globs (directories are listed recursively). Returns the files and the patterns that
    matched nothing."""
    if is_connect(spark):
        return _list_on_server(spark, patterns)
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


def _list_on_server(spark: SparkSession, patterns: list[str]) -> tuple[list[InputFile], list[str]]:
    """`list_inputs` through a DataFrame: the server expands the globs and lists directories
    recursively (skipping names that start with `.` or `_`, as above); no file content is read."""
    found: dict[str, InputFile] = {}
    unmatched: list[str] = []
    for pattern in patterns:
        listing = (spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(pattern)
                   .select("path", "length", F.unix_millis("modificationTime").alias("mtime")))
        try:
            rows = listing.collect()
        except AnalysisException as exc:
            if exc.getCondition() != "PATH_NOT_FOUND":
                raise
            rows = []
        if not rows:
            unmatched.append(pattern)
        for r in rows:
            uri = norm_uri(r["path"])
            found[uri] = InputFile(uri, int(r["length"]), int(r["mtime"]))
    return sorted(found.values(), key=lambda f: f.uri), unmatched


def _add(found: dict[str, InputFile], status) -> None:
    uri = norm_uri(status.getPath().toString())
    found[uri] = InputFile(uri, int(status.getLen()), int(status.getModificationTime()))


def exists(spark: SparkSession, uri: str) -> bool:
    if is_connect(spark):
        return os.path.exists(local_path(uri))
    path, fs = _path(spark, uri)
    return bool(fs.exists(path))


def read_text(spark: SparkSession, uri: str) -> str | None:
    if is_connect(spark):
        try:
            with open(local_path(uri), encoding="utf-8") as fh:
                return fh.read()
        except FileNotFoundError:
            return None
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
    if is_connect(spark):
        path = local_path(uri)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(path + ".tmp", path)
        return
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
    if is_connect(spark):
        directory, target = local_path(directory), local_path(target)
        parts = [n for n in os.listdir(directory) if n.startswith("part-") and n.endswith(suffix)]
        if len(parts) != 1:
            raise RuntimeError(f"expected one {suffix} part in {directory}, found {len(parts)}")
        os.replace(os.path.join(directory, parts[0]), target)
        shutil.rmtree(directory)
        return
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
    if is_connect(spark):
        path = local_path(uri)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
        return
    path, fs = _path(spark, uri)
    if fs.exists(path):
        fs.delete(path, True)


def move_partitions(spark: SparkSession, source: str, target: str) -> int:
    """Move the files of `source/day=*/` into `target/day=*/` (renames, no rewrite); returns how many."""
    if is_connect(spark):
        return _move_local(local_path(source), local_path(target))
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


def _move_local(source: str, target: str) -> int:
    """`move_partitions` on storage this process shares with a Spark Connect server."""
    moved = 0
    for part in sorted(os.listdir(source)):
        if not os.path.isdir(os.path.join(source, part)):
            continue
        dest_dir = os.path.join(target, part)
        os.makedirs(dest_dir, exist_ok=True)
        for name in sorted(os.listdir(os.path.join(source, part))):
            if name.startswith("part-"):
                os.rename(os.path.join(source, part, name), os.path.join(dest_dir, name))
                moved += 1
    return moved
