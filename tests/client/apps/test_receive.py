"""Receiving never writes outside the target, never overwrites, refuses symlinks and zip bombs."""

import stat
import zipfile

import pytest

from burrow.client.apps.receive import check_zip, extract_zip, safe_name
from burrow.client.apps.transfer import zip_directory
from burrow.client.errors import TransferRejected


def make_zip(path, entries):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return path


@pytest.mark.parametrize("name", ["../evil", "a/../../evil", "/etc/passwd", "\\evil", "C:evil", "a/..\\..\\x"])
def test_traversal_refused_before_writing(tmp_path, name):
    z = make_zip(tmp_path / "x.zip", [("ok.txt", b"fine"), (name, b"bad")])
    dest = tmp_path / "out"
    with pytest.raises(TransferRejected):
        extract_zip(z, dest, 100)
    assert not (dest / "ok.txt").exists()  # nothing was extracted
    assert not (tmp_path / "evil").exists()


def test_symlink_refused(tmp_path):
    z = tmp_path / "l.zip"
    with zipfile.ZipFile(z, "w") as zf:
        info = zipfile.ZipInfo("link")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(TransferRejected):
        extract_zip(z, tmp_path / "out", 100)


def test_zip_bomb_refused(tmp_path):
    z = tmp_path / "b.zip"
    with zipfile.ZipFile(z, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("big", b"\0" * 1_000_000)
    with zipfile.ZipFile(z) as zf, pytest.raises(TransferRejected):
        check_zip(zf, 1000)


def test_existing_file_never_overwritten(tmp_path):
    z = make_zip(tmp_path / "x.zip", [("a.txt", b"new")])
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "a.txt").write_bytes(b"old")
    with pytest.raises(FileExistsError):
        extract_zip(z, dest, 100)
    assert (dest / "a.txt").read_bytes() == b"old"


@pytest.mark.parametrize("name,expected", [("a.txt", "a.txt"), ("../../etc/passwd", "passwd"),
                                           ("dir\\x.bin", "x.bin")])
def test_safe_name(name, expected):
    assert safe_name(name) == expected


@pytest.mark.parametrize("name", ["", ".", "..", "a/", "x\x00y"])
def test_safe_name_rejects(name):
    with pytest.raises(TransferRejected):
        safe_name(name)


def test_zip_directory_roundtrip(tmp_path):
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "empty").mkdir()
    (src / "top.txt").write_bytes(b"top")
    (src / "a" / "b" / "deep.bin").write_bytes(bytes(range(256)) * 100)
    numbytes, numfiles = zip_directory(src, tmp_path / "s.zip")
    assert (numbytes, numfiles) == (3 + 25600, 2)
    extract_zip(tmp_path / "s.zip", tmp_path / "dst", numbytes)
    assert (tmp_path / "dst" / "a" / "b" / "deep.bin").read_bytes() == bytes(range(256)) * 100
    assert (tmp_path / "dst" / "empty").is_dir()
