"""The engine's C kernels (`attention.c`, `linear.c`): built on first use with the machine's
C compiler into `~/.cache/spex/kernels/` (`SPEX_KERNEL_DIR`), one build per source, flags and
CPU (`-march=native`: the instructions this CPU has), and loaded with ctypes. Where no
compiler builds them the engine runs on torch alone (`library` is None); `SPEX_KERNELS=torch`
asks for that.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

__all__ = ["DTYPES", "library"]

SOURCES = tuple(Path(__file__).with_name(name) for name in ("attention.c", "linear.c"))
HEADERS = (Path(__file__).with_name("bf16.h"),)  # included by both
FLAGS = ("-O3", "-march=native", "-shared", "-fPIC", "-fopenmp")
DTYPES = {torch.float32: 0, torch.bfloat16: 1}  # the kernels' dtype codes

_LIBRARY: ctypes.CDLL | None | bool = False  # False: not tried yet


def library(dtype: torch.dtype, device: torch.device | str) -> ctypes.CDLL | None:
    """The kernels, for a model of this dtype on this device (None: run on torch)."""
    if os.environ.get("SPEX_KERNELS") == "torch" or torch.device(device).type != "cpu" or dtype not in DTYPES:
        return None
    global _LIBRARY
    if _LIBRARY is False:
        _LIBRARY = _build()
    return _LIBRARY  # type: ignore[return-value]


def _build() -> ctypes.CDLL | None:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    source = b"".join(path.read_bytes() for path in (*SOURCES, *HEADERS))
    key = hashlib.sha256(source + repr((compiler, FLAGS, platform.machine(), _cpu())).encode()).hexdigest()[
        :16
    ]
    folder = Path(os.environ.get("SPEX_KERNEL_DIR", "~/.cache/spex/kernels")).expanduser()
    target = folder / f"spex-kernels-{key}.so"
    if not target.exists():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=folder) as tmp:
                built = Path(tmp) / target.name
                for flags in (FLAGS, tuple(f for f in FLAGS if f != "-fopenmp")):
                    command = [compiler, *flags, *map(str, SOURCES), "-o", str(built), "-lm"]
                    if subprocess.run(command, capture_output=True, timeout=300).returncode == 0:
                        os.replace(built, target)  # atomic: a concurrent build finds one whole file
                        break
                else:
                    return None
        except (OSError, subprocess.SubprocessError):
            return None
    try:
        lib = ctypes.CDLL(str(target))
    except OSError:
        return None
    lib.spex_attend.restype = ctypes.c_int
    lib.spex_packed_size.restype = ctypes.c_int64
    lib.spex_pack.restype = None
    lib.spex_linear.restype = None
    return lib


def _cpu() -> str:
    """What decides the instructions -march=native picks: the CPU's model and flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    return "\n".join(line for line in text.splitlines()[:30] if line.startswith(("model name", "flags")))
