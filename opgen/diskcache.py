"""Where opgen keeps what it builds on disk, and which of it it may load again.

Kernels (TVM libraries), the Ascend emulation's g++ libraries and the default tuning
database live under one root: ``$OPGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/opgen``, else
``~/.cache/opgen``. ``OPGEN_DISK_CACHE=0`` turns the cache of built code off.

A cached library is native code that opgen ``dlopen``s, so the cache is a trust
boundary (SECURITY.md): whoever can write a file under the predicted name runs code in
the next process that loads it. opgen therefore

* creates its directories with mode 0700, and
* loads (or writes) a file only when the file and every directory from the cache root
  down to it belong to the current user and are writable by nobody else (ssh's rule for
  key files). Otherwise it warns once per directory, saying why, and builds in memory or
  in a private temporary directory instead; the file is never loaded.

The checks run when a kernel is loaded or stored, never on a call of a built kernel.

A library is also checked for damage before it is loaded: a file cut short (a full disk, a
killed copy, a file system that lost its tail) maps pages past its end, and the first touch
of one kills the process with SIGBUS, a signal no Python code can catch. So every library
opgen writes here is *sealed*: a trailer after the ELF data (the loader never reads past
the segments its headers name) holds the SHA-256 of everything before it and the file's own
name. ``load_sealed`` loads a file only when its seal matches its bytes and its name (a
valid library of another kernel copied over it fails the name), and the loaded library has
the symbols its caller expects; otherwise the file is moved aside (``<name>.damaged``) with
a one-line warning and the caller rebuilds it. ``payload`` is the library without its seal
(what ``opgen generate`` writes out).
"""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import stat
import tempfile
import threading
import warnings
from pathlib import Path


def cache_dir() -> Path:
    """The root of opgen's disk cache (not created here)."""
    root = os.environ.get("OPGEN_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opgen"


def enabled() -> bool:
    """Whether built code may be cached on disk (``OPGEN_DISK_CACHE=0`` turns it off)."""
    return os.environ.get("OPGEN_DISK_CACHE", "1") not in ("0", "false", "no")


def _owner() -> int:
    """The user whose files opgen trusts (a function: tests substitute another)."""
    return os.geteuid()


def untrusted_reason(path: Path) -> str | None:
    """Why ``path`` (a file or directory that exists) may hold someone else's code; None if
    it belongs to the current user and nobody else can write it."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if info.st_uid != _owner():
        return f"{path} belongs to uid {info.st_uid}, not to this user (uid {_owner()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by its group or by others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _chain(path: Path, root: Path) -> list[Path]:
    """``root`` and every directory below it down to ``path`` (inclusive)."""
    relative = Path(path).relative_to(root)
    chain = [root]
    for part in relative.parts:
        chain.append(chain[-1] / part)
    return chain


def why_untrusted(path: Path) -> str | None:
    """Why a file must not be loaded or written (the first reason found): checked are the
    file and every directory from the cache root down to it (for a file outside the
    cache: its own directory)."""
    path, root = Path(path), cache_dir()
    chain = _chain(path, root) if path == root or root in path.parents else [path.parent, path]
    for step in chain:
        reason = untrusted_reason(step)
        if reason:
            return reason
    return None


_warned: set = set()
_warn_lock = threading.Lock()


def warn_untrusted(reason: str, fallback: str) -> None:
    """One warning per distinct reason per process: the cache is not used, and why."""
    with _warn_lock:
        if reason in _warned:
            return
        _warned.add(reason)
    warnings.warn(f"opgen: not using the disk cache: {reason}; {fallback} (see SECURITY.md)", stacklevel=3)


def private_dir(path: Path) -> Path:
    """Create ``path`` and the missing directories between the cache root and it with mode
    0700 (the root's own parents with the default mode). Returns ``path``."""
    root = cache_dir()
    path = Path(path)
    levels = _chain(path, root) if path == root or root in path.parents else [path]
    if not root.parent.exists():
        root.parent.mkdir(parents=True, exist_ok=True)
    for level in levels:
        try:
            level.mkdir(mode=0o700)
        except FileExistsError:
            pass
    return path


def trusted_dir(path: Path, fallback: str) -> bool:
    """Create ``path`` privately and say whether it may hold code opgen loads. When it may
    not, warn once (with ``fallback``: what opgen does instead) and return False."""
    try:
        private_dir(path)
    except OSError as err:
        warn_untrusted(f"{path} cannot be created ({err.strerror})", fallback)
        return False
    reason = why_untrusted(path)
    if reason:
        warn_untrusted(reason, fallback)
        return False
    return True


def loadable(path: Path) -> bool:
    """Whether an existing cached file may be loaded: present, and it and its directories
    pass ``why_untrusted``. A refusal is warned once per reason."""
    if not Path(path).exists():
        return False
    reason = why_untrusted(path)
    if reason:
        warn_untrusted(reason, "rebuilding instead of loading it")
        return False
    return True


_scratch_lock = threading.Lock()
_scratch: list[Path] = []


def private_scratch_dir() -> Path:
    """A private temporary directory (mode 0700, removed at exit) for code built when the
    cache cannot be trusted: the library is loaded from there instead."""
    with _scratch_lock:
        if not _scratch:
            _scratch.append(Path(tempfile.mkdtemp(prefix="opgen-private-")))
            atexit.register(shutil.rmtree, _scratch[0], True)
        return _scratch[0]


def private_copy(path: Path) -> Path:
    """A copy of ``path`` under a new name in the private scratch directory: a library this
    process must load afresh although it has loaded another file under ``path``'s name."""
    fd, copy = tempfile.mkstemp(dir=private_scratch_dir(), suffix=Path(path).suffix)
    os.close(fd)
    shutil.copyfile(path, copy)
    return Path(copy)


def code_dir(name: str, what: str) -> Path:
    """Where code built outside TVM goes (``what``, a plural: "emulation libraries"): ``<cache>/<name>`` when opgen may load code from it, else the private
    scratch directory of this process (warned once, as every refusal)."""
    cached = cache_dir() / name
    if enabled() and trusted_dir(cached, f"{what} are built in a private temporary directory"):
        return cached
    return private_scratch_dir()


def place(built: Path, dest: Path) -> Path:
    """Copy the file ``built`` to ``dest`` atomically, sealed (a concurrent process sees the
    old file or the whole new one, never half of it); returns ``dest``."""
    fd, staged = tempfile.mkstemp(dir=dest.parent, suffix=dest.suffix)
    os.close(fd)
    try:
        shutil.copyfile(built, staged)
        seal(Path(staged), dest.name)
        os.replace(staged, dest)
    finally:
        if os.path.exists(staged):
            os.unlink(staged)
    return dest


# ---- seals: a library's digest and name after its bytes -----------------------------------

SEAL_MAGIC = b"OPGSEAL1"          # the file's last 8 bytes; the 8 before them: the trailer's length
# Part of every cached library's key: files an opgen without seals wrote are never looked up
# (they would all be set aside as damaged, one warning each), only left behind.
KEY_FORMAT = "sealed-1"


def seal(path: Path, name: str) -> None:
    """Append the seal of ``path``'s bytes, for the file name ``name`` it will have."""
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    line = f"\n#opgen-seal v1 sha256={digest} name={name}\n".encode()
    with open(path, "ab") as out:
        out.write(line + len(line).to_bytes(8, "little") + SEAL_MAGIC)


def _split_seal(data: bytes) -> tuple[bytes, dict] | None:
    """(payload, seal fields) of a sealed file's bytes, or None when it carries no seal."""
    if len(data) < 16 or data[-8:] != SEAL_MAGIC:
        return None
    size = int.from_bytes(data[-16:-8], "little")
    if size > len(data) - 16:
        return None
    words = data[-16 - size:-16].decode("utf-8", "replace").split()
    if words[:2] != ["#opgen-seal", "v1"]:
        return None
    return data[:-16 - size], dict(word.split("=", 1) for word in words[2:] if "=" in word)


def damage(path: Path) -> str | None:
    """Why the sealed library at ``path`` must not be loaded (None: its seal holds)."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        return f"unreadable ({err.strerror})"
    parts = _split_seal(data)
    if parts is None:
        return f"no intact seal ({len(data)} bytes: cut short, overwritten, or not written by opgen)"
    payload, fields = parts
    if fields.get("name") != Path(path).name:
        return f"sealed for {fields.get('name')!r}, another file"
    if fields.get("sha256") != hashlib.sha256(payload).hexdigest():
        return "its bytes do not match its seal"
    return None


def payload(path: Path) -> bytes:
    """The library at ``path`` without its seal (a file with none: all of it)."""
    data = Path(path).read_bytes()
    parts = _split_seal(data)
    return data if parts is None else parts[0]


def set_aside(path: Path, reason: str) -> None:
    """Move a damaged cached file out of the way (``<name>.damaged``) and say so in one
    line; the caller rebuilds it."""
    path, aside = Path(path), Path(path).with_name(Path(path).name + ".damaged")
    try:
        if aside.is_dir() and not aside.is_symlink():     # a folder set aside before (OpenCL binaries)
            shutil.rmtree(aside)
        os.replace(path, aside)
    except OSError:
        pass
    warnings.warn(f"opgen: cached library {path} is damaged: {reason}; moved aside and rebuilt", stacklevel=3)


def intact(path: Path) -> bool:
    """Whether a cached library may be loaded (``loadable``) and is undamaged (``damage``);
    a damaged one is set aside (the caller rebuilds it)."""
    if not loadable(path):
        return False
    reason = damage(path)
    if reason:
        set_aside(path, reason)
    return reason is None


def load_sealed(path: Path, load, expected=lambda loaded: True):
    """``load(path)`` of an ``intact`` cached library that, loaded, passes ``expected`` (its
    symbols). None otherwise: the caller builds it again; a file the loader refuses or that
    lacks the expected symbols is set aside too."""
    if not intact(path):
        return None
    try:
        loaded = load(path)
    except Exception as err:  # the dynamic loader refused it: set aside, rebuilt
        set_aside(path, f"the loader refused it ({type(err).__name__})")
        return None
    if expected(loaded):
        return loaded
    set_aside(path, "it lacks the symbols expected of it")
    return None
