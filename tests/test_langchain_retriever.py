"""pipekit.integrations.langchain: a LangChain retriever over a pipekit index, tested with the
real langchain-core (a test requirement, not the pipeline's)."""
import pytest

langchain_core = pytest.importorskip("langchain_core", reason="langchain-core is not installed "
                                     "(pip install -r requirements-dev.txt)")

import pipekit  # noqa: E402
from pipekit.integrations.langchain import PipekitRetriever  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402


@pytest.fixture(scope="module")
def sample(sample_default_run):
    return sample_default_run  # the session's one default run of the sample (tests/conftest.py)


def test_the_retriever_returns_the_searchers_hits_as_documents(sample):
    retriever = PipekitRetriever(folder=str(sample), k=3)
    assert isinstance(retriever, BaseRetriever)
    docs = retriever.invoke("how do I undo a bad release")
    hits = pipekit.Searcher(sample).search("how do I undo a bad release", k=3)
    assert [type(d) for d in docs] == [Document] * 3
    assert [d.page_content for d in docs] == [h.text for h in hits]
    first = docs[0].metadata
    assert (first["chunk_id"], first["score"], first["rank"]) == (hits[0].chunk_id, hits[0].score, 1)
    assert first["citation"] == hits[0].citation and first["link"] == hits[0].link
    assert first["heading_path"] == hits[0].heading_path and "text" not in first


def test_the_retrievers_filters_are_the_searchers(sample):
    docs = PipekitRetriever(folder=str(sample), k=5, formats=["pdf"]).invoke("alarms at night")
    assert docs and {d.metadata["format"] for d in docs} == {"pdf"}
    assert all(d.metadata["link"].startswith("field-guide.pdf#page=") for d in docs)
    assert PipekitRetriever(folder=str(sample), paths=["web/**"]).invoke("zzzz qqqq") == []
