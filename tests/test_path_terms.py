"""How the source path is indexed (config `indexing.path_weight`; the evidence for the
default is in config.yaml, from bench/docs_qa.py --path-evidence): a chunk's folder names
are terms, counted path_weight times; its file name is not (its headings already name it)."""
from __future__ import annotations

import pyarrow as pa

from pipekit.index.analyzer import Analyzer
from pipekit.run.stages import load_stage

indexing = load_stage(4)


def index(path_weight: int):
    batch = pa.record_batch({
        "chunk_id": ["markdown/lists.md#0", "guide/setup.md#0"],
        "doc_id": ["markdown/lists.md", "guide/setup.md"],
        "heading": ["Lists", "Setup"],
        "path": pa.array([["markdown"], ["guide"]], pa.list_(pa.string())),
        "text": ["Bullets and numbers.", "Install it first."],
        "page_start": pa.array([None, None], pa.int32()), "page_end": pa.array([None, None], pa.int32()),
    })
    terms, postings, chunks, stats = indexing.build_index(
        [batch], Analyzer("none", "none"), k1=1.2, b=0.75, path_weight=path_weight)
    names = terms.column("term").to_pylist()
    tf = {(names[t], c): f for t, c, f in zip(postings.column("term_id").to_pylist(),
                                               postings.column("chunk").to_pylist(),
                                               postings.column("tf").to_pylist())}
    return tf, chunks.column("length").to_pylist()


def test_folder_names_are_terms_counted_path_weight_times():
    tf, lengths = index(1)
    assert tf[("markdown", 0)] == 1 and tf[("guide", 1)] == 1
    assert ("markdown", 1) not in tf  # only the chunk's own folders
    tf2, lengths2 = index(2)
    assert tf2[("markdown", 0)] == 2
    assert [b - a for a, b in zip(lengths, lengths2)] == [1, 1]  # and they count in |c|


def test_the_file_name_is_not_a_path_term():
    tf, _ = index(1)
    assert ("setup", 1) in tf            # from the heading "Setup"
    assert ("lists", 0) in tf            # from the heading "Lists"
    assert tf[("setup", 1)] == 1         # once: setup.md adds nothing
    assert tf[("lists", 0)] == 1


def test_path_weight_zero_leaves_folders_out():
    tf, lengths = index(0)
    assert not any(term in ("markdown", "guide") for term, _ in tf)
    assert lengths == [4, 4]  # heading word + text words, nothing from the path
