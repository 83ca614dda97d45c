"""`python -m pipekit serve`: the index as a live service, for agents (MCP) and programs (HTTP).

    service.py  the loaded index and its three answers (search, read, status), the limits a
                caller meets, and the atomic switch to a rewritten index
    watch.py    --watch: notices edits under documents.input and reruns stages 01-04
    app.py      the MCP server (stdio, or streamable HTTP) and the JSON API beside it,
                with the HTTP checks (bearer token, Host and Origin)
    workers.py  --workers: the HTTP service answered by several processes that share the
                loaded index, and the watcher in a process of its own
    command.py  the command line

A `python -m pipekit search` process pays ~0.8 s of start-up for a search that takes under
a millisecond; an agent asking ten questions waited ten times.  Here the index is loaded
once and every call is answered from memory.  Nothing here scores: the answers are
`pipekit.Searcher`'s, hit for hit.
"""
