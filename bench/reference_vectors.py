"""sentence-transformers' own vectors for tests/reference_folders.py's tiny folders: the
reference the NumPy encoder (pipekit/index/dense.py BertFolder) is held to within 1e-5
(tests/test_dense_reference.py).

    python -m venv /tmp/stvenv && /tmp/stvenv/bin/pip install sentence-transformers
    /tmp/stvenv/bin/python bench/reference_vectors.py     # writes tests/fixtures/reference_vectors.json

Run with a Python that has sentence-transformers and torch (CPU): neither is a requirement of
this project (torch would cost CI gigabytes), so the vectors are made here once and committed,
with each folder's hash; the test rebuilds the folders and refuses a fixture whose hash is
not theirs.  For each kind of folder: `encode(TEXTS, prompt=p)` for no prompt and each of the
folder's prompts, and `encode_query` / `encode_document` (which prompt the library picks for
a query and a document), in float32, on CPU.

Does not use pipekit (the other Python need not have its requirements).
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import reference_folders as rf  # noqa: E402

OUT = REPO / "tests" / "fixtures" / "reference_vectors.json"


def main() -> None:
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    found = {"sentence_transformers": sentence_transformers.__version__, "torch": torch.__version__,
             "texts": rf.TEXTS, "kinds": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in rf.KINDS:
            folder = rf.build(Path(tmp) / kind, kind)
            digest = rf.folder_hash(folder)
            model = SentenceTransformer(str(folder), device="cpu")
            model.eval()
            got = {"hash": digest, "max_seq_length": model.max_seq_length, "encode": {}}
            for name, prompt in rf.prompts_of(kind).items():
                got["encode"][prompt] = model.encode(rf.TEXTS, prompt=prompt, batch_size=2,
                                                     convert_to_numpy=True).astype(float).tolist()
            got["query"] = model.encode_query(rf.TEXTS, convert_to_numpy=True).astype(float).tolist()
            got["document"] = model.encode_document(rf.TEXTS, convert_to_numpy=True).astype(float).tolist()
            found["kinds"][kind] = got
            print(f"{kind:<20} {digest}  prompts {list(got['encode'])}", flush=True)
    OUT.write_text(json.dumps(found, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
