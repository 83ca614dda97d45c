"""LangChain's own standard tests of a retriever (langchain-tests' `RetrieversIntegrationTests`)
run on `PipekitRetriever` over the sample's index: what LangChain expects of every retriever
(k in the constructor and in `invoke`, Documents from invoke and ainvoke, no standard test
overridden).  Offline: the index is built here from data/sample, and nothing is fetched.
Before pipekit/integrations/langchain.py read `invoke`'s keywords, `test_invoke_with_k_kwarg`
failed: `invoke(query, k=1)` returned the constructor's 4 Documents."""
import pytest

pytest.importorskip("langchain_core", reason="langchain-core is not installed (pip install -r requirements-dev.txt)")
pytest.importorskip("langchain_tests", reason="langchain-tests is not installed (pip install -r requirements-dev.txt)")

from langchain_tests.integration_tests import RetrieversIntegrationTests  # noqa: E402

from pipekit.integrations.langchain import PipekitRetriever  # noqa: E402

INDEX: dict[str, str] = {}  # the built index's folder, for the class's properties (not fixtures)


@pytest.fixture(scope="module", autouse=True)
def sample_index(sample_default_run):
    out = sample_default_run  # the session's one default run of the sample (tests/conftest.py)
    INDEX["folder"] = str(out)
    yield out
    INDEX.clear()


# pytest-asyncio runs only the tests marked for it, and the one async test
# (`test_ainvoke_returns_documents`) is inherited: the mark can go on the class alone, where it
# reaches the plain tests too, and pytest-asyncio's warning about each of those is expected.
# (A conftest hook adding the mark to the one test comes after pytest-asyncio has collected it.)
@pytest.mark.asyncio
@pytest.mark.filterwarnings("ignore:The test <Function test_.*> is marked with '@pytest.mark.asyncio' but it "
                            "is not an async function")
class TestPipekitRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[PipekitRetriever]:
        return PipekitRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"folder": INDEX["folder"]}

    @property
    def retriever_query_example(self) -> str:
        # Matches far more than 4 passages of the sample, so every k the tests ask for (1, 3,
        # the default 4) is a count the retriever must cut to, not all there is.
        return "what to do when an alert fires at night"


def test_the_example_query_has_more_hits_than_any_k_the_standard_tests_ask_for():
    # Otherwise `len(result) == 3` would pass for a retriever that ignores k but finds only 3.
    docs = PipekitRetriever(folder=INDEX["folder"], k=50).invoke("what to do when an alert fires at night")
    assert len(docs) > 4


def test_invoke_keywords_hold_for_that_call_only():
    retriever = PipekitRetriever(folder=INDEX["folder"], k=4)
    pdf = retriever.invoke("alarms at night", k=2, formats=["pdf"])
    assert len(pdf) == 2 and {d.metadata["format"] for d in pdf} == {"pdf"}
    after = retriever.invoke("alarms at night")
    assert len(after) == 4 and {d.metadata["format"] for d in after} != {"pdf"}
