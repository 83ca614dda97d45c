"""Model folders run as their authors specify them, held to sentence-transformers itself.

tests/reference_folders.py builds tiny random-weight BERT folders of each kind (mean or [CLS]
pooling, with and without a Normalize module, with prompts, an instruction left out of the
mean); bench/reference_vectors.py encoded the same folders with sentence-transformers (torch,
CPU) into tests/fixtures/reference_vectors.json.  Checked here: the fixture was made from
these very folders (their hash), pipekit's NumPy encoder gives sentence-transformers' vectors
within 1e-5 with every prompt, picks the prompt sentence-transformers picks for a query and
for a document, reads max_seq_length; a folder it cannot run as specified is refused in one
sentence naming what it lacks; what changes the vectors changes the model's identity.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import reference_folders as rf

FIXTURE = Path(__file__).parent / "fixtures" / "reference_vectors.json"
REFERENCE = json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    return {kind: rf.build(root / kind, kind) for kind in rf.KINDS}


def unit(v) -> np.ndarray:
    v = np.asarray(v, np.float64)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_the_fixture_was_made_from_these_folders(folders):
    assert set(REFERENCE["kinds"]) == set(rf.KINDS) and REFERENCE["texts"] == rf.TEXTS
    for kind, folder in folders.items():
        assert rf.folder_hash(folder) == REFERENCE["kinds"][kind]["hash"], \
            f"{kind}: tests/reference_folders.py changed: rerun bench/reference_vectors.py with sentence-transformers"


@pytest.mark.parametrize("kind", list(rf.KINDS))
def test_vectors_equal_sentence_transformers_within_1e_5_with_every_prompt(folders, kind):
    from pipekit.index.dense import BertFolder

    model, ref = BertFolder(folders[kind]), REFERENCE["kinds"][kind]
    assert model.max_len == ref["max_seq_length"] == rf.MAX_SEQ_LENGTH
    assert len(model.token_ids(rf.TEXTS[-1:])[0]) == rf.MAX_SEQ_LENGTH  # the last text is cut: truncation checked
    for prompt, expected in ref["encode"].items():
        got = model.encode(rf.TEXTS, prompt)
        np.testing.assert_allclose(got, np.asarray(expected), atol=1e-5, rtol=0, err_msg=f"{kind} {prompt!r}")
    # Normalised or not as the modules say: the unnormalised kinds' vectors are not unit length.
    norms = np.linalg.norm(model.encode(rf.TEXTS), axis=1)
    assert np.allclose(norms, 1, atol=1e-5) == rf.KINDS[kind][1]


@pytest.mark.parametrize("kind", list(rf.KINDS))
def test_queries_and_documents_get_the_prompts_sentence_transformers_gives_them(folders, kind):
    """embed(kind=...) is what the index keeps: the folder's similarity is cosine, so unit vectors
    in the directions of sentence-transformers' encode_query / encode_document."""
    from pipekit.index.dense import BertFolder

    model, ref = BertFolder(folders[kind]), REFERENCE["kinds"][kind]
    np.testing.assert_allclose(model.embed(rf.TEXTS, kind="query"), unit(ref["query"]), atol=1e-5, rtol=0)
    # A document's prompt: "document", else "passage", else "corpus" among the folder's own
    # prompts (sentence-transformers 5's encode_document).  Version 6 always holds an empty
    # "document" prompt, so its encode_document gives an e5-style folder's passages no
    # "passage: " (the reference's `document`): not how such a model was evaluated.
    prompts = rf.KINDS[kind][2] or {}
    document = next((prompts[n] for n in ("document", "passage", "corpus") if n in prompts), "")
    np.testing.assert_allclose(model.embed(rf.TEXTS), unit(ref["encode"][document]), atol=1e-5, rtol=0)
    if "passage" not in prompts:
        np.testing.assert_allclose(model.embed(rf.TEXTS), unit(ref["document"]), atol=1e-5, rtol=0)
    if rf.KINDS[kind][2]:  # a folder with prompts: the query's vectors are not the document's
        assert np.abs(model.embed(rf.TEXTS, kind="query") - model.embed(rf.TEXTS)).max() > 1e-3


def rewrite(folder: Path, name: str, change) -> None:
    path = folder / name
    obj = json.loads(path.read_text())
    path.write_text(json.dumps(change(obj)))


@pytest.mark.parametrize("name,change,named", [
    ("1_Pooling/config.json", lambda c: {**c, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": True},
     "pooling by max"),
    ("1_Pooling/config.json", lambda c: {**c, "pooling_mode_cls_token": True}, "pooling by cls + mean"),
    ("modules.json", lambda m: m[:2] + [{"idx": 2, "name": "2", "path": "2_Dense",
                                         "type": "sentence_transformers.models.Dense"}] + m[2:],
     "a sentence_transformers.models.Dense module"),
    ("config_sentence_transformers.json", lambda c: {**c, "similarity_fn_name": "euclidean"}, "euclidean similarity"),
    ("config.json", lambda c: {**c, "model_type": "roberta"}, "'roberta' model"),
])
def test_a_folder_that_cannot_be_run_as_specified_is_refused_in_one_sentence(tmp_path, name, change, named):
    from pipekit.index import dense
    from pipekit.run.errors import PipelineError

    folder = rf.build(tmp_path / "m", "mean")
    rewrite(folder, name, change)
    dense._MODELS.clear()
    with pytest.raises(PipelineError) as err:
        dense.load_model(str(folder))
    message = str(err.value)
    assert named in message and "\n" not in message and str(folder) in message


def test_what_changes_the_vectors_changes_the_models_identity(tmp_path):
    from pipekit.index.dense import identity

    folder = rf.build(tmp_path / "m", "prompts")
    before = identity(str(folder))
    rewrite(folder, "config_sentence_transformers.json", lambda c: {**c, "prompts": {"query": "question: "}})
    prompts = identity(str(folder))
    assert prompts != before
    rewrite(folder, "modules.json", lambda m: m[:2])  # Normalize taken out
    assert identity(str(folder)) not in (before, prompts)
    shutil.rmtree(folder / "2_Normalize")
