"""pipekit's search as a LangChain retriever: `PipekitRetriever(folder=...)` returns LangChain
`Document`s, one per hit, its text the passage and its metadata the hit's fields.

    from pipekit.integrations.langchain import PipekitRetriever
    retriever = PipekitRetriever(folder="data", k=4, paths=["handbook/**"])
    docs = retriever.invoke("how do I undo a bad release")
    docs[0].metadata["citation"], docs[0].metadata["link"]
    retriever.invoke("how do I undo a bad release", k=1, formats=["pdf"])  # this call only

One thin class: the ranking, the scores, the filters and the links are `pipekit.Searcher`'s
(pipekit/retrieve/search.py), loaded once on first use and kept.  The metadata are the
hit's `--json` fields (rank, score, chunk_id, doc_id, format, heading, heading_path, pages
and labels, start_char/end_char, citation, link), so a chain can cite and link the passage
it was given.  Not here: async search of its own (LangChain runs the sync one in a thread),
or any other framework; langchain-core is needed only by whoever imports this module.

`k`, `paths` and `formats` given to `invoke` (or `ainvoke`) hold for that call and win over
the retriever's own: LangChain's standard retriever tests (langchain-tests'
`RetrieversIntegrationTests`, run in tests/test_langchain_standard.py) call
`invoke(query, k=1)` and expect one Document; the retriever used to drop the keyword
(BaseRetriever passes a call's keywords on only to a `_get_relevant_documents` that names
them) and return its constructor's 4.
"""
from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import PrivateAttr

from pipekit.retrieve.search import Passage, Searcher


def to_document(hit: Passage) -> Document:
    """A hit as a LangChain Document: the passage as page_content, the rest as metadata."""
    meta = hit.to_json()
    text = meta.pop("text")
    return Document(page_content=text, metadata=meta, id=hit.chunk_id)


class PipekitRetriever(BaseRetriever):
    """The k best passages of a pipekit index (`folder`: its paths.output), as stage 05 ranks them."""

    folder: str
    k: int = 4
    paths: list[str] | None = None  # doc_id globs to keep to (`search --in`)
    formats: list[str] | None = None  # formats to keep to (`search --format`)
    settings: dict[str, Any] | None = None  # retrieval settings; default: those stage 05 last ran with
    _searcher: Searcher | None = PrivateAttr(default=None)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None, paths: list[str] | None = None,
                                formats: list[str] | None = None) -> list[Document]:
        """The best passages for `query`; `k`, `paths`, `formats` (an `invoke` keyword each)
        replace the retriever's own for this call only."""
        if self._searcher is None:  # loaded once: the index's load is the cost, a search is milliseconds
            self._searcher = Searcher(self.folder, settings=self.settings)
        hits = self._searcher.search(query, k=self.k if k is None else k,
                                     paths=self.paths if paths is None else paths,
                                     formats=self.formats if formats is None else formats)
        return [to_document(h) for h in hits]
