"""The DT_NEEDED entries of an ELF shared object (which libraries it links),
its build id and the names of its symbol table.

A minimal reader for 64-bit little-endian ELF (x86-64, aarch64): the
dynamic segment and its string table, through the program headers; the
symbol table through the section headers.  It returns nothing for what it
does not understand rather than failing.
"""

from __future__ import annotations

import functools
import mmap
import struct

_PT_LOAD, _PT_DYNAMIC, _PT_NOTE = 1, 2, 4
_NT_GNU_BUILD_ID = 3
_DT_NULL, _DT_NEEDED, _DT_STRTAB = 0, 1, 5
_SHT_SYMTAB = 2


@functools.lru_cache(maxsize=1024)
def needed(path: str) -> tuple[str, ...]:
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _needed(data)
    except (OSError, ValueError):  # unreadable, empty, or not mappable
        return ()


@functools.lru_cache(maxsize=1024)
def build_id(path: str) -> str | None:
    """The GNU build id of an ELF file as hex, "" if it has none, None if unreadable."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
                return None
            phoff, = struct.unpack_from("<Q", data, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
            for i in range(phnum):
                p_type, _, p_offset, _, _, p_filesz, _, _ = struct.unpack_from(
                    "<IIQQQQQQ", data, phoff + i * phentsize)
                off, end = p_offset, p_offset + p_filesz
                while p_type == _PT_NOTE and off + 12 <= end:
                    namesz, descsz, kind = struct.unpack_from("<III", data, off)
                    name = off + 12
                    desc = name + ((namesz + 3) & ~3)
                    if kind == _NT_GNU_BUILD_ID and data[name:name + namesz] == b"GNU\0":
                        return data[desc:desc + descsz].hex()
                    off = desc + ((descsz + 3) & ~3)
            return ""
    except (OSError, ValueError, struct.error):
        return None


def symbol_names(path: str) -> tuple[str, ...]:
    """The names in an ELF file's symbol table (.symtab, which has the static
    functions too), () if it has none (stripped) or is unreadable."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
                return ()
            shoff, = struct.unpack_from("<Q", data, 0x28)
            shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
            # (type, offset, size, link) of each section header
            sections = [struct.unpack_from("<4xI16xQQI", data, shoff + i * shentsize)
                        for i in range(shnum)]
            names = []
            for kind, offset, size, link in sections:
                if kind != _SHT_SYMTAB or link >= len(sections):
                    continue
                strtab = sections[link][1]
                for st_name, in struct.iter_unpack("<I20x", data[offset:offset + size]):
                    end = data.find(b"\0", strtab + st_name)
                    if end > strtab + st_name:
                        names.append(data[strtab + st_name:end].decode("utf-8", "replace"))
            return tuple(names)
    except (OSError, ValueError, struct.error):  # unreadable, empty, truncated
        return ()


def _needed(data: mmap.mmap) -> tuple[str, ...]:
    """Only the pages holding the headers, the dynamic segment and the names are read."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return ()
    try:
        phoff, = struct.unpack_from("<Q", data, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
        loads, dynamic = [], None
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from(
                "<IIQQQQQQ", data, phoff + i * phentsize)
            if p_type == _PT_LOAD:
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == _PT_DYNAMIC:
                dynamic = (p_offset, p_filesz)
        if dynamic is None:
            return ()
        entries, strtab = [], None
        for off in range(dynamic[0], dynamic[0] + dynamic[1], 16):
            tag, val = struct.unpack_from("<qQ", data, off)
            if tag == _DT_NULL:
                break
            if tag == _DT_NEEDED:
                entries.append(val)
            elif tag == _DT_STRTAB:
                strtab = next((val - va + fo for va, fo, sz in loads if va <= val < va + sz),
                              None)
        if strtab is None:
            return ()
        names = []
        for e in entries:
            end = data.find(b"\0", strtab + e)
            names.append(data[strtab + e:end].decode("utf-8", "replace"))
        return tuple(names)
    except (struct.error, ValueError):
        return ()
