"""The index as a service: loaded once, answering search, read and status, switched atomically.

`Service` holds one loaded index (a `pipekit.Searcher` and what `status` reports about
it) in one attribute, `current`.  Every call takes `current` once at its start and uses
only that, so a call sees the old index or the new one, never a mix; switching is one
assignment, made only after the new index has loaded completely.  A failed load (a
pipeline half way through rewriting the outputs: 03_chunks new, 04_* not yet) keeps the
old index serving, and `status` says why; the next change on disk is tried again.

The limits a caller meets are here, each named in its error, because a server answers
strangers: an agent's `k` of a billion, a pasted 50 kB "query", or a section the size of
a manual must cost one sentence, not the server's memory.

What it does not do: score (that is `Searcher`, hit for hit as `python -m pipekit search`),
speak a protocol (app.py), or run the pipeline (watch.py).
"""
from __future__ import annotations

import gc
import json
import os
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from pipekit.retrieve.search import Searcher
from pipekit.run import io
from pipekit.run.errors import PipelineError
from pipekit.run.stages import STAGES, get_stage

MAX_K = 50                 # hits a call: an agent's context holds a few; past 50 a caller wants an export
MAX_QUERY_CHARS = 1_000    # a question is a sentence or two; a pasted page is not a query
MAX_FILTERS = 20           # globs or formats in one call
MAX_RESPONSE_BYTES = 1 << 20  # one JSON answer at most (k=50 long passages stay far below it)
REFRESH_SECONDS = 0.5      # how often the outputs on disk are looked at for a rewrite


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def outputs_signature(output_dir: Path) -> tuple:
    """What the index's files are now: (name, inode, size, mtime) of the outputs a Searcher
    reads.  The stages write each output to a temporary name and rename it over the old one,
    so a rewritten output has a new inode even when its size and time look the same."""
    names = ("01_documents.parquet", "03_chunks.parquet", *get_stage(4).outputs, "04_vectors.parquet",
             get_stage(5).outputs[0])
    out = []
    for name in dict.fromkeys(names):
        try:
            st = os.stat(output_dir / name)
        except FileNotFoundError:
            continue
        out.append((name, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def folder_signature(root: Path, skip: Path | None = None) -> tuple:
    """(path, size, mtime) of every file under `root` (or of `root`, a file), without the
    folder `skip` (the outputs, when they sit inside the input): what `status` compares
    before it asks stage 01 whether the folder changed."""
    if root.is_file():
        st = root.stat()
        return ((str(root), st.st_size, st.st_mtime_ns),)
    out = []
    skip_s = str(skip.resolve()) if skip is not None else None
    for folder, dirs, files in os.walk(root):
        if skip_s is not None and str(Path(folder).resolve()) == skip_s:
            dirs[:] = []
            continue
        dirs.sort()
        for name in sorted(files):
            p = os.path.join(folder, name)
            try:
                st = os.lstat(p)
            except OSError:  # gone between the listing and the stat: the next look sees it
                continue
            out.append((p, st.st_size, st.st_mtime_ns))
    return tuple(out)


def reason_of(status: str, error: str | None) -> str:
    """A kind of failure that counts well: the message's first clause, file names and
    numbers left out ("same bytes as a.md: read once, as a.md" and "... as b.md" are one
    reason; "12 MB (12,582,912 bytes) is larger than documents.max_bytes (10 MB)" and a 3 MB
    file's too).  Parentheses go first: they hold the particulars, and a colon may be in them."""
    text = re.sub(r"\s*\([^()]*\)", "", error or "no message").split(":", 1)[0]
    text = re.sub(r"\d[\d,.]*\s*[KMGT]?i?B\b|\d[\d,.]*", "N", text)  # sizes and counts
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\S+/\S+|\S+\.[A-Za-z]\w{0,4}\b", "…", text)  # names and paths
    return f"{status}: {text.strip()}"


@dataclass(frozen=True)
class Loaded:
    """One loaded index and what `status` tells about it: replaced whole, never edited."""

    searcher: Searcher
    signature: tuple
    loaded_at: str
    built_at: str
    load_seconds: float
    documents: dict = field(default_factory=dict)  # counts from 01_documents.parquet
    folder: str | None = None  # documents.input as the index was built from it


def documents_summary(output_dir: Path) -> tuple[dict, str | None]:
    """Documents read by format, and what was not read, by reason, from stage 01's output."""
    path = output_dir / get_stage(1).outputs[0]
    if not path.exists():
        return {}, None
    table = io.read_table(path, ["doc_id", "format", "status", "error"])
    ok = pc.equal(table.column("status"), "ok")
    by_format = {v["values"]: v["counts"] for v in pc.value_counts(table.column("format").filter(ok)).to_pylist()}
    bad = table.filter(pc.invert(ok)).to_pylist()
    reasons = Counter(reason_of(r["status"], r["error"]) for r in bad)
    meta = io.read_meta(path) or {}
    folder = meta.get("inputs", {}).get("config", {}).get("documents.input")
    return {"read": sum(by_format.values()), "by_format": dict(sorted(by_format.items())),
            "not_read": {"total": len(bad), "by_reason": dict(reasons.most_common()),
                         "examples": [f"{r['status']} {r['doc_id']}: {r['error']}" for r in bad[:5]]}}, folder


def check_query(query) -> str:
    if not isinstance(query, str):
        raise PipelineError(f"query must be text; got {type(query).__name__}")
    if not query.strip():
        raise PipelineError("query is empty: ask in words, e.g. 'how do I configure logging'")
    if len(query) > MAX_QUERY_CHARS:
        raise PipelineError(f"query is {len(query):,} characters, over the limit of {MAX_QUERY_CHARS:,}: "
                            f"ask a question, not a page")
    return query


def check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise PipelineError(f"k must be a whole number from 1 to {MAX_K} (hits to return); got {k!r}")
    return k


def check_list(value, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise PipelineError(f"{name} must be a list of non-empty strings; got {value!r}")
    if len(value) > MAX_FILTERS:
        raise PipelineError(f"{name} has {len(value)} entries, over the limit of {MAX_FILTERS}")
    return list(value)


def bounded(answer: dict, texts: int) -> dict:
    """The answer, or an error if its JSON would pass MAX_RESPONSE_BYTES.  `texts`: the
    characters of its texts, which are nearly all of it; the answer is encoded to be
    measured only when they come near the limit (encoding it twice was a tenth of a call)."""
    if 4 * texts < MAX_RESPONSE_BYTES // 2:  # a character is at most 4 bytes of UTF-8 (6 escaped: \uXXXX)
        return answer
    size = len(json.dumps(answer, ensure_ascii=False).encode())
    if size > MAX_RESPONSE_BYTES:
        raise PipelineError(f"the answer would be {size:,} bytes, over the limit of {MAX_RESPONSE_BYTES:,}: "
                            f"ask for fewer hits (k)")
    return answer


class Service:
    """The index in `cfg`'s paths.output, loaded, answering calls, and switched when rewritten."""

    def __init__(self, cfg: dict, options: list[str] = ()):
        self.cfg = cfg
        self.options = list(options)
        self.output_dir = Path(cfg["paths"]["output"])
        self.reload_error: str | None = None
        self.watcher = None  # watch.Watcher, with --watch
        self.workers = 1  # processes answering (workers.py sets it); status names which one answered
        self._failed: tuple | None = None  # the outputs' signature a load last failed on
        self._loading = threading.Lock()  # one load at a time (the refresher and a watch rerun)
        self._status_cache: tuple[tuple, list[str]] | None = None  # (index and folder as seen, changes)
        self.current = self._load(outputs_signature(self.output_dir))

    # ------------------------------------------------------------------ loading

    def _load(self, signature: tuple) -> Loaded:
        t0 = time.perf_counter()
        searcher = Searcher(self.output_dir, settings=self.cfg["retrieval"], options=self.options)
        searcher.link_base = self.cfg["documents"].get("link_base")
        documents, folder = documents_summary(self.output_dir)
        if outputs_signature(self.output_dir) != signature:
            # Rewritten while we read it: parts of two runs may be in hand. Not served.
            raise PipelineError("the index changed while it was being loaded")
        built = self.output_dir / get_stage(4).outputs[0]
        return Loaded(searcher, signature, now(), datetime.fromtimestamp(built.stat().st_mtime, timezone.utc)
                      .isoformat(timespec="seconds"), round(time.perf_counter() - t0, 3), documents,
                      folder or str(self.cfg["documents"]["input"]))

    def refresh(self) -> bool:
        """Load the outputs on disk if they were rewritten since the loaded index; True if
        the service switched.  A load that fails keeps the old index serving, and says why in
        `status` until a load succeeds."""
        signature = outputs_signature(self.output_dir)
        if signature == self.current.signature or signature == self._failed:
            return False
        with self._loading:
            try:
                loaded = self._load(signature)
            except (PipelineError, OSError, ValueError, KeyError) as exc:
                self._failed = signature
                self.reload_error = (f"{now()}: the outputs in {self.output_dir} were rewritten but could not be "
                                     f"loaded ({exc}); still serving the index built {self.current.built_at}")
                return False
            self.current, self._failed, self.reload_error = loaded, None, None
            self._status_cache = None
        # The old index's arrays are freed once no call holds it, but Arrow's allocator keeps
        # the pages for reuse: without giving them back, each switch left ~25 MB more resident
        # (222 -> 247 -> 264 -> 286 MB over three, on bench/serve.py's folder; 221 after this).
        gc.collect()
        pa.default_memory_pool().release_unused()
        return True

    def refresh_forever(self, stop: threading.Event, every: float = REFRESH_SECONDS,
                        wake: threading.Event | None = None) -> None:
        """The refresher thread's loop: look at the outputs every `every` seconds, or at once
        when `wake` is set (a worker's, after the watcher's rerun: workers.py)."""
        wake = wake or threading.Event()
        while True:
            wake.wait(every)
            wake.clear()
            if stop.is_set():
                return
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - a refresher that dies would serve a stale index silently
                self.reload_error = f"{now()}: refresh failed: {type(exc).__name__}: {exc}"

    # ------------------------------------------------------------------ the three answers

    def search(self, query, k=5, paths=None, formats=None) -> dict:
        query, k = check_query(query), check_k(k)
        paths, formats = check_list(paths, "paths"), check_list(formats, "formats")
        searcher = self.current.searcher  # once: this call's index, whatever happens meanwhile
        hits = searcher.search(query, k, paths=paths, formats=formats)
        answer = {"query": query, "k": k, "hits": [h.to_json() for h in hits]}
        note = searcher.shortfall(hits, k, paths, formats, names=("the paths filter", "the formats filter"))
        if note:  # fewer than k: why, in the words `search --in/--format` uses
            answer["note"] = note
        return bounded(answer, sum(len(h.text) for h in hits))

    def read(self, chunk_id, around=0, section=False) -> dict:
        answer = self.current.searcher.read(chunk_id, around, section)
        return bounded(answer, 2 * len(answer["text"]))  # the text, and each passage's

    def status(self) -> dict:
        cur = self.current
        changed = self._folder_changes(cur)
        out = {
            "folder": cur.folder,
            "output": str(self.output_dir.resolve()),
            "documents": {k: v for k, v in cur.documents.items() if k != "not_read"},
            "not_read": cur.documents.get("not_read", {"total": 0, "by_reason": {}, "examples": []}),
            "chunks": int(cur.searcher.index.stats["N"]),
            "index_built": cur.built_at,
            "index_loaded": cur.loaded_at,
            "folder_changed_since": bool(changed) if changed is not None else None,
            "changes": (changed or [])[:5],
            "reload_error": self.reload_error,
            "watch": self.watcher.state() if self.watcher is not None else None,
            "process": {"pid": os.getpid(), "workers": self.workers},
            "limits": {"k": MAX_K, "query_chars": MAX_QUERY_CHARS, "filters": MAX_FILTERS,
                       "response_bytes": MAX_RESPONSE_BYTES},
        }
        return out

    def _folder_changes(self, cur: Loaded) -> list[str] | None:
        """Why stage 01 would run now (its input files differ from the index's); None when
        that cannot be told (no stage-01 output).  Stage 01's own judgement (it may hash a
        file whose time changed), asked again only when a stat of every file says something
        moved: a status call on an unchanged folder costs the stats."""
        from pipekit.cli import why_stale  # stage 01's freshness, with its walk of the folder

        if not (self.output_dir / get_stage(1).outputs[0]).exists():
            return None
        seen = (cur.signature, folder_signature(Path(self.cfg["documents"]["input"]), self.output_dir))
        cached = self._status_cache
        if cached and cached[0] == seen:
            return cached[1]
        try:
            reasons = why_stale(STAGES[0], self.cfg, self.output_dir)
        except (PipelineError, OSError) as exc:
            reasons = [f"cannot tell: {exc}"]
        self._status_cache = (seen, reasons)
        return reasons
