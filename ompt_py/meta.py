"""A trace's metadata (``Trace.meta``), made from the tool's own documents.

The tool describes its process in a META document when it starts and in
STATS documents as it goes (counters per thread, clock anchors, modules): in
the raw files' blocks, or through ``_core.meta()``/``_core.stats()`` in
process.  This module turns them into the trace's metadata, one entry per
process, for the in-process recorder (ompt_py.live) and the raw-file reader
(ompt_py.io) alike.  Base layer: imports only the record vocabulary.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .records import RECORD_VERSION, THREAD_TYPES
from .schema import FORMAT

#: The reason of the records of a thread that got no buffer (no memory left for it).
NOBUF_REASON = "no memory for the thread's buffer"


def thread_rows(stats: dict, before: dict[int, tuple[int, int, int]] | None = None
                ) -> list[dict]:
    """One row per thread of a STATS document: its type, runtime, OS thread id and
    the records written, dropped and lost (not buffered: no memory for the
    thread's buffer) since ``before`` (counts per thread at a window's start;
    threads with nothing new are left out).  The raw-file reader replaces the
    counts with its ledger's (io/ledger.py)."""
    rows = []
    for th in stats["threads"]:
        w0, d0, l0 = (before or {}).get(th["thread"], (0, 0, 0))
        written, dropped, lost = th["written"] - w0, th["dropped"] - d0, th.get("nobuf", 0) - l0
        if before is not None and th["thread"] in before and not (written or dropped or lost):
            continue
        rows.append(
            {
                "thread": th["thread"],
                "type": THREAD_TYPES.get(th["type"], str(th["type"])),
                "runtime": th.get("runtime", 0),
                "tid": th["tid"],
                "written": written,
                "dropped": dropped,
                "lost": lost,
                "samples_skipped": th.get("samples_skipped", 0),
            }
        )
    return sorted(rows, key=lambda r: r["thread"])


def modules(*docs: dict | None) -> list[dict]:
    """The union of the module lists of several meta/stats documents."""
    seen: dict[tuple, dict] = {}
    for doc in docs:
        for m in (doc or {}).get("modules", []):
            seen.setdefault((m["path"], m["start"], m["end"]), m)
    return list(seen.values())


def rank(meta: dict) -> int | None:
    """The job rank in a raw file's META document (None: the process had none)."""
    found = meta.get("rank", -1)  # -1: no launcher rank variable (or an older tool)
    return found if found >= 0 else None


def process_entry(meta: dict, last_stats: dict | None, threads: list[dict],
                  stacks: list[dict], **extra: Any) -> dict:
    """The trace metadata of one process, from its META document, its latest
    STATS document, its thread rows and its STACKS documents (python_entry);
    ``extra``: more keys.  ``lost`` (records its threads produced that are in no
    part of the trace) is the sum of its threads' unless ``extra`` gives it;
    ``ending`` (how it ended: "finalize", "exit", "_exit", "exec", "abort",
    "finish", "killed" when nothing was recorded, "stop" for a trace stopped in
    the process) comes from ``extra``."""
    keep = ("pid", "ppid", "hostname", "exe", "argv", "ld_preload", "clock", "config",
            "runtimes")
    entry = {k: meta[k] for k in keep}
    # The runtimes as they were last: the meta is written once, when the trace starts
    # (under ompt-py run --mpi, maybe before the runtime).  STATS documents describe
    # them whole; older ones only their states (runtime_states).
    stats = last_stats or {}
    if "runtimes" in stats:
        entry["runtimes"] = stats["runtimes"]
    else:
        states = stats.get("runtime_states", [])
        entry["runtimes"] = [{**rt, **(states[i] if i < len(states) else {})}
                             for i, rt in enumerate(meta["runtimes"])]
    entry["tool"] = {
        "start_tool_calls": stats.get("start_tool_calls", meta["start_tool_calls"]),
        "declined": stats.get("declined", meta["declined"]),
        "record_version": meta["record_version"],
    }
    # MPI: the rank the launcher gave (else the one MPI told), the node-local rank,
    # the job, and MPI's own word (the latest STATS document that has it).
    said = next((d["mpi"] for d in (last_stats, meta) if d and "mpi" in d), None)
    entry["rank"] = rank(meta) if rank(meta) is not None or not said else said["rank"]
    if "job_id" in meta:  # record version 7 on (older traces read as before)
        entry["local_rank"] = meta["local_rank"] if meta.get("local_rank", -1) >= 0 else None
        entry["job_id"] = meta["job_id"] or None
    if said:
        entry["mpi"] = {k: said[k] for k in ("rank", "size", "source")}
    entry["start_realtime_ns"] = meta["start_realtime_ns"]
    entry["stop_realtime_ns"] = last_stats["realtime_ns"] if last_stats else None
    entry["threads"] = threads
    entry["written"] = sum(t["written"] for t in threads)
    entry["dropped"] = sum(t["dropped"] for t in threads)
    entry["lost"] = sum(t.get("lost", 0) for t in threads)
    entry["sink_lost"] = last_stats["sink_lost"] if last_stats else 0
    entry["buffer_bytes"] = last_stats["buffer_bytes"] if last_stats else None
    # Region names grow as the run goes: the longest list is the latest.  The table
    # holds the error callback's messages too; what it refused when full is counted
    # (the keys are there only then: traces that lost nothing read as before).
    entry["region_names"] = max(meta.get("region_names", []),
                                (last_stats or {}).get("region_names", []), key=len)
    for refused in ("region_unnamed", "error_messages_unkept"):
        if (last_stats or meta).get(refused):
            entry[refused] = (last_stats or meta)[refused]
    # The in-place route's stalls (as many as the tool_stall records; the keys are
    # there only when there were some).
    for counter in ("region_stalls", "region_stall_ns"):
        if (last_stats or {}).get(counter):
            entry[counter] = last_stats[counter]
    # Devices and their tracing counters, as the latest document has them (the key
    # is there from record version 6 on: a trace of an older tool reads as before).
    # Kept per process only, as threads are (a trace saved by process keeps them).
    latest = last_stats if last_stats and "devices" in last_stats else meta
    if "devices" in latest:
        entry["devices"] = latest["devices"]
    python = python_entry(stacks)
    if python is not None:
        entry["python"] = python
    entry.update(extra)
    return entry


def python_entry(docs: list[dict]) -> dict | None:
    """A process's Python call stacks (``meta["processes"][i]["python"]``) from
    the tool's STACKS documents (of the shape schema.STACKS_DOC), in the order
    written (each adds the codes and stacks from its ``codes_from``/``stacks_from``
    on): the interpreter's description (status: on, off or unsupported, and
    why; depth; version; working directory; library folders), ``codes``
    ([file, name, first line], code id 1 first), ``stacks`` ([truncated, code,
    line, code, line...], frames outermost first, then a list of native return
    addresses, outermost first, when the capture kept native frames; stack id
    1 first), the codes and stacks the tool's full tables refused, and the
    captures whose native frames were not found (native_missed).  None when
    the process ran no Python stacks."""
    codes: list[list] = []
    stacks: list[list] = []
    interpreter, refused = None, {"codes_refused": 0, "stacks_refused": 0, "native_missed": 0}
    for doc in docs:
        for table, key in ((codes, "codes"), (stacks, "stacks")):
            start, rows = doc[f"{key}_from"], doc[key]
            table.extend([None] * (start - len(table)))  # a block lost in between
            table[start:start + len(rows)] = rows
        interpreter = dict(doc["interpreter"] or interpreter or {})
        refused = {k: doc.get(k, 0) for k in refused}
    if not interpreter and not stacks:
        return None
    return {**(interpreter or {"status": "on"}), "codes": codes, "stacks": stacks, **refused}


def trace_meta(processes: list[dict], origin_mono_ns: int | None,
               skipped: list[dict] | None = None) -> dict:
    """The metadata of a trace of these processes, with its written/dropped/lost
    totals and what a partial load left out (``skipped``: {"source", "reason"}
    each, none repeated)."""
    unique = {(s["source"], s["reason"]): s for s in skipped or []}
    return {"format": FORMAT, "origin_mono_ns": origin_mono_ns, "processes": processes,
            "written": sum(p["written"] for p in processes),
            "dropped": sum(p["dropped"] for p in processes),
            "lost": sum(p.get("lost", 0) for p in processes),
            "skipped": list(unique.values())}


def why_empty(meta: dict) -> str:
    """Why a trace of these metadata holds no event (the summary's line, the
    warning of a trace window that recorded none)."""
    processes = meta.get("processes", [])
    attached = sorted({rt["path"] for p in processes for rt in p.get("runtimes", [])
                       if rt.get("initialized")})
    if attached:
        return (f"no events: the tool was attached to {', '.join(attached)}, but no OpenMP "
                "construct ran while the trace recorded")
    off = any(p.get("fallback", {}).get("policy") == "off" for p in processes)
    return ("no events: no OpenMP runtime started with the tool attached while the trace "
            "recorded: the code that ran used no OpenMP"
            + (", or ran on GNU libgomp, which has no tool interface (the runtime fallback "
               "was off: OMPTPY_RUNTIME=off)" if off else ""))


def with_losses(meta: dict) -> dict:
    """``meta`` with the loss keys of traces written before the tool kept a ledger
    (none lost, ending "unknown"), so that every trace has them."""
    for proc in meta.get("processes", []):
        for th in proc.get("threads", []):
            th.setdefault("lost", 0)
        proc.setdefault("lost", sum(th["lost"] for th in proc.get("threads", [])))
        proc.setdefault("ending", "unknown")
        proc.setdefault("lost_reasons", {})
        proc.setdefault("unaccounted_threads", 0)
    meta.setdefault("lost", sum(p["lost"] for p in meta.get("processes", [])))
    return meta


def interned_strings(meta: dict, pids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The text of each of ``ids`` (region marker names, error messages: None for id 0
    or an id the metadata lacks), from its process's table of strings
    (``meta["processes"][i]["region_names"]``, id 1 first)."""
    out = np.full(len(pids), None, dtype=object)
    for proc in meta.get("processes", []):
        mine = pids == proc["pid"]
        table = np.array([None, *proc.get("region_names", [])], dtype=object)
        of = ids[mine].astype(np.int64)
        out[mine] = table[np.where((of >= 0) & (of < len(table)), of, 0)]
    return out


def record_versions(meta: dict, pids: np.ndarray) -> np.ndarray | None:
    """The record version (csrc/include/omptpy.h) of the process of each of ``pids``
    (a process whose metadata does not say: this one's); None when every process
    wrote the current version."""
    known = {p["pid"]: p.get("tool", {}).get("record_version", RECORD_VERSION)
             for p in meta.get("processes", [])}
    if all(v >= RECORD_VERSION for v in known.values()):
        return None
    keys = np.array(sorted(known), dtype=np.int64)
    values = np.array([known[k] for k in keys], dtype=np.int16)
    at = np.minimum(np.searchsorted(keys, pids), len(keys) - 1)
    return np.where(keys[at] == pids, values[at], RECORD_VERSION)


def ranks(meta: dict, pids: np.ndarray) -> pd.arrays.IntegerArray | None:
    """The job rank of the process of each of ``pids`` (``<NA>`` where the process
    had none); None when no process of the trace had a rank."""
    known = {p["pid"]: p.get("rank") for p in meta.get("processes", [])}
    if all(r is None for r in known.values()):
        return None
    keys = np.array(sorted(known), dtype=np.int64)
    values = np.array([-1 if known[k] is None else known[k] for k in keys], dtype=np.int32)
    found = values[np.minimum(np.searchsorted(keys, pids), len(keys) - 1)]
    return pd.arrays.IntegerArray(found, found < 0)
