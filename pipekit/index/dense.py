"""Dense vectors: one embedding per chunk, from a model that never downloads (`indexing.dense_model`).

BM25 finds passages that share the question's words; a question asked in other words
("stop a child process" for a section about `subprocess.kill`) it cannot find. An
embedding model maps a text to a vector whose direction stands for what it is about, so
texts about the same thing point the same way whatever their words: the cosine of two
L2-normalised vectors (their dot product) measures it.

What this module does:
- loads the configured model, offline, with nothing downloaded (`load_model`):
  `wordllama`, the 256-d static model inside the WordLlama wheel (an average of token
  vectors: hundreds of thousands of words a second, no neural network at run time), or a
  sentence-transformers model folder of the BERT family (all-MiniLM-L6-v2, bge-small, e5:
  `config.json`, `tokenizer.json`, `model.safetensors`, `1_Pooling/config.json`), run by
  `BertFolder`, a transformer encoder in plain NumPy — no torch, no ONNX runtime: the
  tokenizer and safetensors readers it needs already come with WordLlama;
- runs a folder as its authors specify it (`folder_spec`): pooling and Normalize from
  modules.json, max_seq_length and do_lower_case, the query and document prompts of
  config_sentence_transformers.json; what it cannot run so is refused in one sentence;
- embeds a chunk longer than the model's window whole (`BertFolder.windows`): its first
  window as truncation cuts it, then windows that repeat its heading line and cover the
  rest; stage 04 keeps one row per chunk, the later windows' vectors in a `windows` column
  (the fusion combines a chunk's windows' cosines: pipekit/retrieve/fusion.py WINDOW_RULE);
- names the model (`identity`: its name and its files' BLAKE2b hashes), which stage 04
  records, so a different model (or changed weights in the same folder) makes 04 stale;
- embeds stage 03's chunks (heading trail, then text; for WordLlama the own heading
  weighted as BM25 weighs it) into one L2-normalised float32 vector per chunk, in chunk
  order (`vector_rows`: 04_vectors.parquet);
- embeds them a block at a time, blocks cut by chunk id (`block_starts`), and copies
  from the previous run's vectors every block whose texts, model and code are the same
  (`Blocks`): a rerun embeds only what changed;
- moves stage 04's progress bar as chunks are done (a model folder: each packed pass), and
  once the first second of embedding gives a rate, says how long the rest will take
  (`Forecast`, measured: a rate per model would be wrong on another machine or text);
- embeds queries with the same model (stage 05's fusion with BM25: pipekit/retrieve/fusion.py).

Kept apart from the fusion so that stage 04's vectors go stale only when the embedding
code changes, not when the way stage 05 mixes scores does.

What it does not do: GPU, model architectures other than BERT's in a folder (the error
says what the folder lacks), modules beyond Transformer, Pooling (mean or [CLS]) and
Normalize, ONNX files (a folder needs its model.safetensors), or download anything.
"""
from __future__ import annotations

import bisect
import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipekit.run.errors import PipelineError
from pipekit.chunk.headings import TRAIL_SEPARATOR

WORDLLAMA = "wordllama"
WORDLLAMA_CONFIG, WORDLLAMA_DIM = "l2_supercat", 256
VECTORS = "04_vectors.parquet"
EMBED_BATCH = 256  # chunks embedded per step at most (`block_starts`)
ATTENTION_GROUP = 2  # BertFolder: texts whose attention runs as one padded product (sorted by length: little padding;
# 16 made each group's scores 50 MB, out of cache: attention took 1.6-2x as long as in pairs)
TOKENS_PER_BATCH = 8192  # BertFolder: tokens of one packed forward pass (its matrices stay ~50 MB)
FOLDER_FILES = ("config.json", "tokenizer.json", "model.safetensors", "1_Pooling/config.json",
                "sentence_bert_config.json", "modules.json", "config_sentence_transformers.json")
# config_sentence_transformers.json is hashed too: its prompts change every vector.
WINDOW_OVERLAP = 32  # word pieces a window of a long chunk shares with the one before (`BertFolder.windows`)
HEADING_SHARE = 4  # a later window repeats at most max_seq_length / 4 word pieces of prompt and heading
_MODELS: dict = {}  # this process's loaded model, by spec: a worker loads it once per stage


# ---------------------------------------------------------------- which model, and its identity

def wordllama_folder() -> Path:
    try:
        import wordllama
    except ImportError:
        raise PipelineError("indexing.dense_model is wordllama but the package is not installed: "
                            "pip install -r requirements.txt") from None
    return Path(wordllama.__file__).parent


def _hash(path: Path) -> str:
    h = hashlib.blake2b(digest_size=8)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_files(spec: str) -> dict[str, Path]:
    """The files that make the model, by name: what its identity hashes."""
    if spec == WORDLLAMA:
        folder = wordllama_folder()
        return {"weights": folder / "weights" / f"{WORDLLAMA_CONFIG}_{WORDLLAMA_DIM}.safetensors"}
    folder = Path(spec)
    if not folder.is_dir():
        raise PipelineError(f"indexing.dense_model: {folder} is not a folder (a sentence-transformers model "
                            "folder, as `huggingface-cli download` or SentenceTransformer.save leave it)")
    missing = [n for n in FOLDER_FILES[:4] if not (folder / n).is_file()]
    if missing:
        raise PipelineError(f"indexing.dense_model: {folder} lacks {', '.join(missing)} (needed: a BERT-family "
                            "sentence-transformers folder with its tokenizer.json and model.safetensors)")
    return {n: folder / n for n in FOLDER_FILES if (folder / n).is_file()}


def identity(spec: str | None) -> dict | None:
    """The model's name and its files' hashes (None: no model). Recorded by stage 04, so a
    different model, or the same folder with other weights, makes the vectors stale."""
    if spec is None:
        return None
    try:
        files = model_files(spec)
        hashes = {n: _hash(p) for n, p in files.items()}
    except (PipelineError, OSError) as exc:  # stage 04 says it in one line; freshness only compares
        return {"model": spec, "unreadable": str(exc)}
    name = spec
    if spec == WORDLLAMA:
        from importlib.metadata import version

        name = f"wordllama {version('wordllama')} {WORDLLAMA_CONFIG} {WORDLLAMA_DIM}-d"
    return {"model": name, "files": hashes}


def load_model(spec: str):
    """The embedder for `spec` (cached in this process), or one line saying what is wrong."""
    if spec not in _MODELS:
        _MODELS.clear()
        if spec == WORDLLAMA:
            _MODELS[spec] = WordLlamaModel()
        else:
            model_files(spec)  # the missing-file message first
            try:
                _MODELS[spec] = BertFolder(Path(spec))
            except PipelineError:
                raise
            except Exception as exc:  # a corrupt file: one line naming it, not a traceback
                raise PipelineError(f"indexing.dense_model: cannot load {spec}: {type(exc).__name__}: {exc}") from None
    return _MODELS[spec]


# ---------------------------------------------------------------- the two runtimes

class WordLlamaModel:
    """WordLlama's static token vectors, averaged: the model inside its wheel, never downloaded.
    Its vocabulary is cased and trained on lower-cased text: an upper-case query scored
    near zero against the same words in lower case, so every text is lower-cased first."""

    name = WORDLLAMA

    def __init__(self):
        from wordllama import WordLlama

        self.model = WordLlama.load(config=WORDLLAMA_CONFIG, dim=WORDLLAMA_DIM, cache_dir=wordllama_folder(),
                                    disable_download=True)
        self.dim = WORDLLAMA_DIM

    def embed(self, texts: list[str], done=None, kind: str = "document") -> np.ndarray:
        """The texts' vectors; `done(n)` is told when they are (a progress bar's step); no
        prompts, whatever the `kind`."""
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        v = self.model.embed([t.lower() for t in texts], norm=False, batch_size=64)
        if done is not None:
            done(len(texts))
        return normalise(v)


def normalise(v: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a row of zeros, a text with no known token, stays zero)."""
    v = np.asarray(v, dtype=np.float32)
    n = np.linalg.norm(v, axis=1, keepdims=True)
    return np.divide(v, n, out=np.zeros_like(v), where=n > 0)


# A&S 7.1.26's constants for erfc(|x|/√2)/2: p scaled by 1/√2 and the coefficients halved
# (both exact rescalings folded in here, two passes fewer over every GELU input).
_ERFC_P = np.float32(0.3275911 / np.sqrt(2))
_ERFC_HALF = [np.float32(c / 2) for c in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)]


_EXP_FLOOR: dict = {}  # width -> a row of -36 (`_gelu`)


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x·Φ(x), written as (x + |x|)/2 − |x|·erfc(|x|/√2)/2 with erfc by
    Abramowitz & Stegun 7.1.26 (error below 1.5e-7, under float32's own rounding at these
    magnitudes): scipy's erf took a third of the encoder's time (14 ns a number); this is
    ~20 passes of float32 arithmetic over a block in cache (~3 ns).  Every pass is one NumPy
    call with a fast loop: against a scalar, np.maximum and np.minimum take 4x an add (0.39
    ns a number) where against a row of the same width they take 2x, and np.reciprocal 2x
    np.divide(1, t) — so the floor is a row and the ReLU part is (x + |x|)/2."""
    a = np.abs(x)
    t = a * _ERFC_P
    t += np.float32(1)
    np.divide(np.float32(1), t, out=t)
    w = t * _ERFC_HALF[-1]
    for c in _ERFC_HALF[-2::-1]:
        w += c
        w *= t
    e = np.multiply(a, a, out=t)
    e *= np.float32(-0.5)
    # exp(-x²/2) below -36 is under float32's normal range; those denormals cost ~50x a
    # normal exp (GELU took 40 % of the encoder); there erfc is below float32's resolution anyway.
    floor = _EXP_FLOOR.get(x.shape[-1])
    if floor is None:
        floor = _EXP_FLOOR.setdefault(x.shape[-1], np.full(x.shape[-1], -36, np.float32))
    np.maximum(e, floor, out=e)
    np.exp(e, out=e)
    w *= e
    w *= a
    out = np.add(x, a, out=a)
    out *= np.float32(0.5)
    out -= w
    return out


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """Layer norm of each row, in place in `x` (a block of rows: its passes stay in cache)."""
    x -= x.mean(axis=-1, keepdims=True)
    scale = np.mean(x * x, axis=-1, keepdims=True)
    scale += np.float32(eps)
    np.sqrt(scale, out=scale)
    x /= scale
    x *= g
    x += b
    return x


ROWS = 256  # token rows one thread carries through a layer's products and steps (`BertFolder._dense_rows`)
GELU_ROWS = 64  # rows of GELU's passes: 64 x 1536 float32 (384 KB) stays in a core's 1 MB L2
_POOL = None


def _pool():
    """Threads for the row blocks and attention groups, one per BLAS thread: NumPy lets go of
    the GIL inside a ufunc, a reduction or a BLAS call, so two blocks run at once on two cores."""
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor
        from threadpoolctl import threadpool_info

        blas = max((i.get("num_threads") or 1 for i in threadpool_info() if i.get("user_api") == "blas"), default=1)
        _POOL = ThreadPoolExecutor(max(1, blas), thread_name_prefix="bert")
    return _POOL


def _on_pool(fn, parts) -> None:
    """fn(part) for every part, spread over the pool: each part is computed alone (BLAS on one
    thread: the caller's one_thread), so the result is the same bits whichever thread, and
    however many threads, take it."""
    for f in [_pool().submit(fn, part) for part in parts]:
        f.result()


def _in_blocks(fn, n_rows: int, rows: int | None = None) -> None:
    """fn(rows) for every `rows`-row slice (ROWS) of n_rows, on the pool."""
    rows = rows or ROWS
    _on_pool(fn, [slice(r, r + rows) for r in range(0, n_rows, rows)])


# A Pooling module's modes: sentence-transformers 6 saves `pooling_mode` (a name or a list);
# before, one boolean per mode (read as sentence-transformers reads them: none set is mean).
LEGACY_POOLINGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                   "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                   "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
MODULES = ("Transformer", "Pooling", "Normalize")  # a module's class, whichever package path names it
DOCUMENT_PROMPTS = ("document", "passage", "corpus")  # sentence-transformers' encode_document, in its order


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def folder_spec(folder: Path) -> dict:
    """How the folder's authors say its model is run, from its sentence-transformers files:

    - modules.json: a Transformer, then a Pooling module, then a Normalize module or none.  A
      folder without modules.json is read as before it was read at all: its 1_Pooling, and
      normalised.  Any other module (a Dense projection, a word-embedding model) is refused:
      run without it, the vectors would not be the model's.
    - the Pooling module's config: the mean of the token vectors or the [CLS] one; any other
      mode (max, weighted mean, last token, several concatenated) is refused.  `include_prompt`
      false leaves the prompt's tokens out of the mean, as sentence-transformers does.
    - sentence_bert_config.json: max_seq_length (512 if unsaid) and do_lower_case.
    - config_sentence_transformers.json: `prompts` and `default_prompt_name` (the query's
      prompt: "query", else the default; a document's: "document", "passage" or "corpus",
      else the default — sentence-transformers' encode_query / encode_document), and
      `similarity_fn_name`: cosine (the default) or dot; euclidean or manhattan refused.

    Each refusal is one sentence naming what the folder asks for that this runtime lacks."""
    def refuse(what: str) -> PipelineError:
        return PipelineError(f"indexing.dense_model: {folder} asks for {what}, which pipekit's BERT runtime "
                             "does not have (it runs a Transformer, mean or [CLS] pooling, and an optional "
                             "Normalize)")

    modules = _json(folder / "modules.json") if (folder / "modules.json").is_file() else None
    pooling_path, normalize = "1_Pooling", True
    if modules is not None:
        types = [str(m.get("type", "")) for m in modules]
        kinds = [t.rsplit(".", 1)[-1] if t.startswith("sentence_transformers.") else t for t in types]
        for t, kind in zip(types, kinds):
            if kind not in MODULES:
                raise refuse(f"a {t} module (modules.json)")
        if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]):
            raise refuse(f"its modules in the order {' -> '.join(kinds)} (modules.json)")
        pooling_path = modules[1].get("path") or "1_Pooling"
        normalize = kinds[2:] == ["Normalize"]
    pooling = _json(folder / pooling_path / "config.json")
    modes = pooling.get("pooling_mode") or [m for k, m in LEGACY_POOLINGS.items() if pooling.get(k)] or ["mean"]
    modes = [modes] if isinstance(modes, str) else list(modes)
    if modes not in (["cls"], ["mean"]):
        raise refuse(f"pooling by {' + '.join(modes)} ({pooling_path}/config.json)")
    sbert = _json(folder / "sentence_bert_config.json")
    st = _json(folder / "config_sentence_transformers.json")
    similarity = st.get("similarity_fn_name") or "cosine"
    if similarity not in ("cosine", "dot"):
        raise refuse(f"{similarity} similarity (config_sentence_transformers.json)")
    prompts = st.get("prompts") or {}
    default = prompts.get(st.get("default_prompt_name") or "", "")
    document = next((prompts[n] for n in DOCUMENT_PROMPTS if n in prompts), default)
    return {"cls": modes == ["cls"], "normalize": normalize,
            "include_prompt": bool(pooling.get("include_prompt", True)),
            "max_seq_length": int(sbert.get("max_seq_length") or 512),
            "do_lower_case": bool(sbert.get("do_lower_case", False)), "similarity": similarity,
            "query_prompt": prompts.get("query", default), "document_prompt": document}


class BertFolder:
    """A sentence-transformers folder of the BERT family, run in NumPy (float32).

    The encoder is BERT's: token + position + type embeddings, layer-normed; then per layer
    self-attention (heads of size hidden/heads, scaled dot products, softmax) and a GELU
    feed-forward block, each added back and layer-normed; then the folder's pooling (mean
    of the token vectors, or the [CLS] one) and L2 normalisation.  Texts are tokenized by
    the folder's tokenizer.json, truncated at its max_seq_length, sorted by length and
    *packed*: the linear layers run on every token of a batch at once (no padding), attention
    per text on its own tokens only (groups of neighbours padded, the padding masked out).
    A text's vector then depends on the texts beside it only in its last bits (BLAS's
    summation order follows the shape of the product); stage 04 packs the same texts together
    on every engine (`vector_rows`).

    How it reaches the machine's matmul rate (issue 37, bench/embed_speed.py): BLAS runs on one
    thread and the pool's threads (one per core) each carry a block of ROWS token rows through a
    layer's whole dense part — attention output, residual + layer norm, feed-forward in, GELU,
    out, residual + layer norm — so the 1536-wide activations of a block stay in cache between
    the products (a whole pass's were 50 MB: every step between the GEMMs went to memory, and
    each GEMM split over both cores cost a join).  Attention runs per pair of texts on the
    same threads.  A block's arithmetic does not depend on which thread runs it, so the
    vectors are the same bits on any number of threads (local engine or a Dask worker)."""

    def __init__(self, folder: Path):
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        cfg = json.loads((folder / "config.json").read_text())
        if cfg.get("model_type") != "bert":
            raise PipelineError(f"indexing.dense_model: {folder} holds a {cfg.get('model_type')!r} model; "
                                "this runtime runs BERT-family folders (model_type bert)")
        self.name = str(folder)
        self.heads, self.eps = int(cfg["num_attention_heads"]), float(cfg.get("layer_norm_eps", 1e-12))
        self.n_layers, self.dim = int(cfg["num_hidden_layers"]), int(cfg["hidden_size"])
        spec = folder_spec(folder)
        self.max_len = min(spec["max_seq_length"], int(cfg.get("max_position_embeddings", 512)))
        self.cls, self.normalize, self.lower = spec["cls"], spec["normalize"], spec["do_lower_case"]
        self.include_prompt, self.similarity = spec["include_prompt"], spec["similarity"]
        self.query_prompt, self.document_prompt = spec["query_prompt"], spec["document_prompt"]
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_len)
        self._whole = Tokenizer.from_file(str(folder / "tokenizer.json"))  # untruncated: a long chunk's windows
        self._whole.no_padding()
        self._whole.no_truncation()
        from threadpoolctl import ThreadpoolController

        self._threads = ThreadpoolController()
        raw = load_file(str(folder / "model.safetensors"))
        # Saved from BertModel ("embeddings.…") or from a wrapper ("bert.embeddings.…").
        w = {k.split("bert.", 1)[-1] if k.startswith("bert.") else k: v.astype(np.float32) for k, v in raw.items()}
        e = "embeddings."
        self.word, self.pos = w[e + "word_embeddings.weight"], w[e + "position_embeddings.weight"]
        self.type0 = w[e + "token_type_embeddings.weight"][0]
        self.ln0 = (w[e + "LayerNorm.weight"], w[e + "LayerNorm.bias"])
        self.layers = []
        for i in range(self.n_layers):
            p = f"encoder.layer.{i}."
            a = p + "attention."
            # Q, K and V as one matrix: one product over the batch's tokens instead of three.
            qkv = np.concatenate([w[a + f"self.{n}.weight"] for n in ("query", "key", "value")]).T.copy()
            qkv_b = np.concatenate([w[a + f"self.{n}.bias"] for n in ("query", "key", "value")])
            self.layers.append((qkv, qkv_b, w[a + "output.dense.weight"].T.copy(), w[a + "output.dense.bias"],
                                (w[a + "output.LayerNorm.weight"], w[a + "output.LayerNorm.bias"]),
                                w[p + "intermediate.dense.weight"].T.copy(), w[p + "intermediate.dense.bias"],
                                w[p + "output.dense.weight"].T.copy(), w[p + "output.dense.bias"],
                                (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])))

    def one_thread(self):
        """BLAS on one thread, for the pool's blocks.  The pool is sized first, by BLAS's own
        threads: sized inside the limit, it got one thread and the encoder ran on one core."""
        _pool()
        return self._threads.limit(limits=1, user_api="blas")

    def token_ids(self, texts: list[str]) -> list[np.ndarray]:
        texts = [t.lower() for t in texts] if self.lower else texts
        return [np.asarray(e.ids, dtype=np.int64) for e in self.tokenizer.encode_batch(texts)]

    def prompt_skip(self, prompt: str) -> int:
        """Leading tokens left out of the mean: none, or with `include_prompt` false the [CLS]
        and the prompt's tokens (sentence-transformers' prompt_length: the prompt tokenized
        with its special tokens, less the last)."""
        if self.include_prompt or not prompt or self.cls:
            return 0
        return len(self.token_ids([prompt])[0]) - 1

    def windows(self, texts: list[str], prefixes: list[str]) -> list[list[np.ndarray]]:
        """Each text's windows of token ids: its first is the text as the model's window cuts it
        (max_seq_length word pieces, [CLS] and [SEP] included: the vector a truncating
        encoder gives); a text longer than that gets more, each [CLS] + the text's `prefix`
        (prompt and heading line, at most max_seq_length / HEADING_SHARE of its word pieces) +
        the next stretch of the rest + [SEP], consecutive stretches sharing WINDOW_OVERLAP
        pieces, until the text's last piece is in one.  Why the heading again: a window cut
        from the middle of a section no longer says what it is about, and the heading is
        what most questions name."""
        if self.lower:
            texts, prefixes = [t.lower() for t in texts], [p.lower() for p in prefixes]
        whole = self._whole.encode_batch(texts)
        out = []
        long = [i for i, e in enumerate(whole) if len(e.ids) > self.max_len]
        heads = dict(zip(long, self._whole.encode_batch([prefixes[i] for i in long], add_special_tokens=False)))
        for i, e in enumerate(whole):
            ids = np.asarray(e.ids, dtype=np.int64)
            if i not in heads:
                out.append([ids])
                continue
            p = len(heads[i].ids)
            head = ids[1:1 + min(p, self.max_len // HEADING_SHARE)]
            body = ids[1 + p:-1]
            room = self.max_len - 2 - len(head)
            overlap = min(WINDOW_OVERLAP, room // 4)
            first = np.concatenate([ids[:self.max_len - 1], ids[-1:]])
            at = max(0, self.max_len - 2 - p) - overlap
            got = [first]
            while at + overlap < len(body):
                got.append(np.concatenate([ids[:1], head, body[max(at, 0):max(at, 0) + room], ids[-1:]]))
                at = max(at, 0) + room - overlap
            out.append(got)
        return out

    def forward(self, ids: list[np.ndarray], skip: int = 0) -> np.ndarray:
        """Pooled vectors of token-id sequences, packed into one pass (not normalised: `encode`
        does as the folder says); `skip`: leading tokens left out of the mean (`prompt_skip`)."""
        lengths = [len(i) for i in ids]
        starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        positions = np.concatenate([np.arange(n) for n in lengths])
        x = self.word[np.concatenate(ids)] + self.pos[positions] + self.type0
        _layer_norm(x, *self.ln0, self.eps)
        n = len(x)

        def project(r, qkv, qkv_b):
            np.matmul(x[r], qkv, out=y[r])
            y[r] += qkv_b

        # BLAS on one thread, the pool's threads on the cores: measured (bench/embed_speed.py,
        # 200 SciFact chunks) BLAS's own threads on the whole pass's products left the encoder
        # at 40-55 % of the matmul rate, mostly in the memory-bound steps between them.
        # y and ctx once a pass, not once a layer: 50 MB of fresh pages each time cost their
        # first-touch page faults again (the Q/K/V product ran at half the block's BLAS rate).
        y, ctx = np.empty((n, 3 * self.dim), np.float32), np.empty_like(x)
        q, k, v = np.split(y, 3, axis=1)
        with self.one_thread():
            _in_blocks(lambda r: project(r, *self.layers[0][:2]), n)
            for i, layer in enumerate(self.layers):
                self._attend(q, k, v, starts, ctx)
                # The next layer's Q/K/V product in the same block, while its rows are in cache.
                after = (lambda r: project(r, *self.layers[i + 1][:2])) if i + 1 < len(self.layers) else None
                _in_blocks(lambda r: self._dense_rows(x, ctx, r, layer, after), n)
        if self.cls:
            return x[starts[:-1]]
        return np.stack([x[min(a + skip, z - 1):z].mean(axis=0) for a, z in zip(starts[:-1].tolist(), starts[1:].tolist())])

    def _dense_rows(self, x: np.ndarray, ctx: np.ndarray, r: slice, layer, after=None) -> None:
        """A layer's part after attention for the token rows `r`, in place in x: attention
        output + bias + residual, layer norm; feed-forward in + bias, GELU, out + bias +
        residual, layer norm; then `after(r)` (the next layer's Q/K/V product).  Rows are
        independent here, so a block never waits on another."""
        _, _, wo, bo, ln1, wi, bi, wo2, bo2, ln2 = layer
        a = ctx[r] @ wo
        a += bo
        a += x[r]
        xr = _layer_norm(a, *ln1, self.eps)
        h = xr @ wi
        h += bi
        for s in range(0, len(h), GELU_ROWS):
            h[s:s + GELU_ROWS] = _gelu(h[s:s + GELU_ROWS])
        a = h @ wo2
        a += bo2
        a += xr
        x[r] = _layer_norm(a, *ln2, self.eps)
        if after is not None:
            after(r)

    def _attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, starts: np.ndarray, ctx: np.ndarray) -> None:
        """Self-attention of each text over its own tokens, into `ctx`: the texts (sorted by
        length, so neighbours are nearly as long) in groups padded to the group's longest,
        all heads of a group in one 4-D product.  A text per Python iteration with its heads
        copied apart held the encoder at ~36 % of the matmul rate (bench/embed_speed.py);
        the padded keys get a score of -inf, so their softmax weight is exactly 0 and a
        text's context is its own tokens' alone (only the summation order, its last bits,
        follows the group).

        The score matrices (heads x n x n a text: 830 M numbers for 200 SciFact chunks, twice
        GELU's) are what costs, so they get as few passes as softmax allows: the 1/√d scale
        goes on the queries as they are copied in, -inf only on padded columns (not a mask
        added everywhere), and the division by the row sums on the context (n x 32), not on
        the scores (n x n)."""
        h, dh = self.heads, self.dim // self.heads
        scale = np.float32(1 / np.sqrt(dh))
        bounds = list(zip(starts[:-1].tolist(), starts[1:].tolist()))

        def attend(group):
            n = max(z - a for a, z in group)
            qs = np.zeros((len(group), h, n, dh), np.float32)
            ks = np.zeros((len(group), h, dh, n), np.float32)
            vs = np.zeros((len(group), h, n, dh), np.float32)
            for i, (a, z) in enumerate(group):
                m = z - a
                np.multiply(q[a:z].reshape(m, h, dh).transpose(1, 0, 2), scale, out=qs[i, :, :m])
                ks[i, :, :, :m] = k[a:z].reshape(m, h, dh).transpose(1, 2, 0)
                vs[i, :, :m] = v[a:z].reshape(m, h, dh).transpose(1, 0, 2)
            s = np.matmul(qs, ks)
            for i, (a, z) in enumerate(group):
                s[i, :, :, z - a:] = -np.inf
            s -= s.max(axis=-1, keepdims=True)
            np.exp(s, out=s)
            total = s.sum(axis=-1, keepdims=True)
            c = np.matmul(s, vs)
            c /= total
            for i, (a, z) in enumerate(group):
                ctx[a:z] = c[i, :, :z - a].transpose(1, 0, 2).reshape(z - a, self.dim)

        # Groups on the pool's threads, BLAS on one thread each (the caller's one_thread).
        _on_pool(attend, [bounds[g:g + ATTENTION_GROUP] for g in range(0, len(bounds), ATTENTION_GROUP)])

    def packed(self, ids: list[np.ndarray], skip: int = 0, done=None, counts=None) -> np.ndarray:
        """Pooled vectors of token-id sequences, sorted by length and packed TOKENS_PER_BATCH
        tokens a pass; `done(n, tokens)` is told after each pass, n the sum of `counts` of its
        sequences (1 each without): a block of 256 chunks takes this encoder 10-25 s (20
        chunks/s quiet, half that busy), too long for a bar to stand still."""
        out = np.zeros((len(ids), self.dim), np.float32)
        order = np.argsort([len(i) for i in ids], kind="stable")  # similar lengths together
        batch: list[int] = []
        tokens = 0
        for i in order.tolist() + [None]:
            if i is None or (batch and tokens + len(ids[i]) > TOKENS_PER_BATCH):
                if batch:
                    out[batch] = self.forward([ids[j] for j in batch], skip)
                    if done is not None:
                        done(len(batch) if counts is None else int(counts[batch].sum()), tokens)
                batch, tokens = [], 0
            if i is not None:
                batch.append(i)
                tokens += len(ids[i])
        return out

    def encode(self, texts: list[str], prompt: str = "", done=None) -> np.ndarray:
        """What sentence-transformers' encode(texts, prompt=prompt) gives for this folder: the
        prompt put before each text, the folder's pooling, normalised only if its modules
        end with Normalize.  `done(n, tokens)` as in `packed`."""
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        v = self.packed(self.token_ids([prompt + t for t in texts]), self.prompt_skip(prompt), done)
        return normalise(v) if self.normalize else v

    def stored(self, v: np.ndarray) -> np.ndarray:
        """Vectors as the index keeps them: their dot product is the folder's similarity, so
        unit length for cosine (the default), as the model gave them for dot."""
        return normalise(v) if self.similarity == "cosine" else np.asarray(v, np.float32)

    def embed(self, texts: list[str], done=None, kind: str = "document") -> np.ndarray:
        """The texts' vectors as the index keeps them (`stored`), each with the folder's prompt
        for its `kind` ("query" or "document"), truncated at max_seq_length; `done(n)` is told
        after each packed pass of n of them."""
        prompt = self.query_prompt if kind == "query" else self.document_prompt
        return self.stored(self.encode(texts, prompt, None if done is None else lambda n, _: done(n)))

    def embed_windows(self, heads: list[str], texts: list[str], done=None):
        """Chunks embedded whole: each chunk's `chunk_text(head, text)` with the document
        prompt cut into `windows`; returns the first windows' vectors (one a chunk: what
        `embed` gives), the later windows' vectors and each one's chunk (ascending), and the
        tokens embedded.  `done(chunks, tokens)` after each packed pass, a chunk counted
        with its first window."""
        prompt = self.document_prompt
        full = [prompt + chunk_text(h, t) for h, t in zip(heads, texts)]
        prefixes = [prompt + (h + "\n\n" if h else "") for h in heads]
        wins = self.windows(full, prefixes)
        ids = [w for ws in wins for w in ws]
        owner = np.repeat(np.arange(len(wins)), [len(ws) for ws in wins])
        first = np.ones(len(ids), np.int64)
        first[1:] = owner[1:] != owner[:-1]
        v = self.packed(ids, self.prompt_skip(prompt), done, first) if ids else np.zeros((0, self.dim), np.float32)
        v = self.stored(normalise(v) if self.normalize else v)
        at = np.flatnonzero(first)
        rest = np.flatnonzero(first == 0)
        return v[at], v[rest], owner[rest], sum(len(i) for i in ids)


# ---------------------------------------------------------------- stage 04: the vectors

def chunk_text(heading, text, repeats: int = 1) -> str:
    """What a chunk's vector stands for: its heading trail (what it is about), then its own
    heading (the trail's last) again until it has been said `repeats` times, then its text."""
    if not heading:
        return text or ""
    own = heading.rsplit(TRAIL_SEPARATOR, 1)[-1]
    return "\n\n".join([heading] + [own] * (repeats - 1) + [text or ""])


def heading_repeats(spec: str, heading_weight: int) -> int:
    """How many times a chunk's own heading counts in its vector (`chunk_text`).

    For WordLlama, `indexing.heading_weight`, as BM25 counts it: a vector that is the average
    of its tokens' weighs a 4-word heading at 1/75 of a 300-word section, though it names
    what the section is about.  Only the own heading: the parents are every sibling
    section's too, and weighting them pulls siblings' vectors together.  Measured
    (bench/hybrid.py --fusions, "trail once"): nDCG@10 +1.5 % on Cranfield (95 % interval
    +0.3 .. +2.8), the mean of the three shared collections +0.5 % (−0.0 .. +1.1), the sample
    equal, docs_qa's hit@3 equal and its hit@1 two of 57 questions lower.  A transformer
    (a model folder) reads the heading once: to attention a repeated phrase is not a weight,
    and it would spend the model's window."""
    return max(heading_weight, 1) if spec == WORDLLAMA else 1


def vectors_schema(dim: int) -> pa.Schema:
    # `block`: what its block of chunks embedded, hashed (`Blocks`): a rerun reuses equal blocks.
    # `windows`: a long chunk's later windows' vectors (`BertFolder.windows`), empty for a chunk
    # the model's window holds; `vector` is its first window's, what a truncating encoder
    # gives.  One row per chunk, as before: whatever reads `vector` alone reads what it did.
    return pa.schema([("chunk", pa.int32()), ("vector", pa.list_(pa.float32(), dim)), ("block", pa.string()),
                      ("windows", pa.list_(pa.list_(pa.float32(), dim)))])


def windows_array(extra: np.ndarray, owner: np.ndarray, n: int, dim: int) -> pa.Array:
    """The `windows` column of n chunks: chunk i's rows of `extra` (those whose `owner` is i,
    ascending)."""
    offsets = np.searchsorted(np.asarray(owner, np.int64), np.arange(n + 1)).astype(np.int32)
    inner = pa.FixedSizeListArray.from_arrays(pa.array(np.asarray(extra, np.float32).reshape(-1)), dim)
    return pa.ListArray.from_arrays(pa.array(offsets), inner)


def windows_of(col) -> tuple[np.ndarray, np.ndarray]:
    """A `windows` column (list of vectors per chunk) as (later windows' vectors, each one's
    row in the column)."""
    col = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    counts = np.asarray(pc.fill_null(pc.list_value_length(col), 0), np.int64)
    inner = pc.list_flatten(col)
    dim = inner.type.list_size
    v = np.asarray(inner.flatten().to_numpy(zero_copy_only=False), np.float32).reshape(-1, dim)
    return v, np.repeat(np.arange(len(counts)), counts)


def model_dim(spec: str) -> int:
    """The model's vector size, without loading it (the client of a cluster never embeds)."""
    if spec == WORDLLAMA:
        return WORDLLAMA_DIM
    return int(json.loads(model_files(spec)["config.json"].read_text())["hidden_size"])


# Chunks are embedded in blocks, and a block is the unit a rerun reuses.  Why blocks: a model
# folder's vector of a text can change in its last bits with the texts packed beside it (BLAS
# picks its summation order by the shape of the product: seen with OpenBLAS 0.3.31 on a fresh
# install), so every engine must pack the same texts together.  Why cut by chunk_id, not at
# fixed places (every 256th chunk, as before): one file added near the start then shifted
# every later block, and no block of the previous run could be reused.  A cut after each
# chunk whose chunk_id hashes to 0 mod CUT_EVERY depends on that chunk alone, so an added or
# changed document moves only the cuts around it (content-defined chunking, as rsync and
# backup tools cut files).
CUT_EVERY = 64  # a block ends after ~1 chunk in 64 ...
# ... or at EMBED_BATCH chunks, whichever comes first (a progress-bar step; WordLlama pads within one)


def block_starts(chunk_ids) -> list[int]:
    """Where each block of a run of chunks starts (the run's first chunk starts one).
    Decided here once, for the whole corpus: each partition is given its blocks' sizes
    (`block_sizes`)."""
    starts, size = [0], 0
    for i, cid in enumerate(chunk_ids):
        size += 1
        if size >= EMBED_BATCH or \
                int.from_bytes(hashlib.blake2b(cid.encode(), digest_size=8).digest(), "big") % CUT_EVERY == 0:
            starts.append(i + 1)
            size = 0
    return starts[:-1] if starts[-1] == len(chunk_ids) and len(starts) > 1 else starts


def block_sizes(starts: list[int], start: int, stop: int) -> list[int]:
    """The sizes of the blocks of chunks [start, stop), which starts a block (`block_parts`)."""
    inside = starts[bisect.bisect_left(starts, start):bisect.bisect_left(starts, stop)]
    return np.diff(inside + [stop]).tolist()


def block_parts(parts: list, starts: list[int]) -> list:
    """The partitions' row ranges moved to start on a block (`block_starts` of the whole
    corpus): a block never straddles two partitions, so every engine packs it alike."""
    from pipekit.run.engine import RowRange

    cuts = sorted({0, parts[-1].stop} | {starts[bisect.bisect_right(starts, p.start) - 1] for p in parts})
    return [RowRange(parts[0].path, a, b) for a, b in zip(cuts, cuts[1:])] or parts[:1]


class Blocks:
    """The previous run's vectors by block key, for `vector_rows` to reuse.

    A block's key hashes what made its vectors: the model's identity, this module's code and
    every text of the block in order.  Equal keys, equal texts packed alike, by the same model
    and code: the vectors are the ones embedding would give, bit for bit, so a rerun embeds
    only the blocks whose chunks changed.

    On either engine: a cluster's task reads the previous file where the client left it (its
    workers write their part files into the same output folder, so they see it), each task
    the whole `block` column (~40 bytes a chunk) but of the vectors only the row groups of
    the blocks it copies (each block is one row group): reading every vector in every task
    would cost a 1M-chunk corpus of a 256-d model 1 GB per task.  A previous file a task
    cannot read costs nothing but the copying: its blocks are embedded."""

    def __init__(self, spec: str, previous: str | None, windows: bool = True):
        salt = json.dumps([identity(spec), _hash(Path(__file__))] + ([] if windows else ["truncated"]),
                          sort_keys=True).encode()
        self.salt = hashlib.blake2b(salt, digest_size=16).digest()
        self.previous, self._at, self._rows = previous, None, None

    def key(self, texts: list[str]) -> str:
        h = hashlib.blake2b(self.salt, digest_size=16)
        for t in texts:
            b = t.encode()
            h.update(len(b).to_bytes(8, "big"))
            h.update(b)
        return h.hexdigest()

    def find(self, key: str, n: int):
        """The previous run's n vectors of the block with this key and their `windows` column, or None."""
        if self.previous is None:
            return None
        if self._at is None:
            from pipekit.run import io

            try:
                blocks = pc.dictionary_encode(io.read_table(self.previous, ["block"]).column("block").combine_chunks())
            except Exception:  # unreadable, or from before blocks had keys: embed everything
                self.previous = None
                return None
            # Each key's first row (equal blocks are equal texts): every key occurs, so the
            # first indices of 0, 1, ... line up with the dictionary.
            first = np.unique(np.asarray(blocks.indices), return_index=True)[1]
            self._at = dict(zip(blocks.dictionary.to_pylist(), first.tolist()))
        at = self._at.get(key)
        if at is None:
            return None
        if self._rows is None:
            from pipekit.run.incremental import PreviousRows

            self._rows = PreviousRows(self.previous)
        rows = pa.concat_tables(self._rows.take(at, at + n))
        col = rows.column("vector").combine_chunks()
        v = col.flatten().to_numpy(zero_copy_only=False).reshape(n, -1)
        if "windows" not in rows.column_names:  # from before windows: embed the block again
            return None
        return v, rows.column("windows").combine_chunks()


def rough_duration(seconds: float) -> str:
    """A duration as a person says it ("about 30 s", "about 7 min", "about 1 h 20 min"):
    a forecast from one measured second is good to a few tens of percent, not to the second."""
    if seconds < 60:
        return f"about {max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"about {minutes} min"
    h, m = divmod(minutes, 60)
    return f"about {h} h {m} min" if m else f"about {h} h"


def forecast_line(model: str, left: int, rate: float, measured: int, may_copy: bool) -> str:
    """What stage 04 says once it has measured its embedding rate: how long the rest takes."""
    return (f"04 vectors: {left:,} chunks left to embed with {model}: {rough_duration(left / max(rate, 1e-9))} "
            f"({rate:,.0f} chunks/s over the first {measured:,}"
            + ("; less where blocks are unchanged since the last run, which are copied" if may_copy else "") + ")")


class Forecast:
    """Stage 04's word, early, on how long embedding will take: measured, not assumed.

    A rate constant per model would be wrong here: a model folder's speed depends on the
    texts' lengths (attention grows with their square), the machine and whatever else runs
    on it (issue 37: 7.5 minutes quiet, 18 busy, on the same 12,461 chunks).  So the rate is
    timed on the first chunks embedded, until a second or a full block (EMBED_BATCH) has
    gone by, and the forecast is printed above the progress bar, once.  A corpus embedded
    within that first second is done before a forecast would matter, and gets none.  Only
    where a bar is shown (a person watching, the local engine: pipekit/run/engine.py `tell`)."""

    SECONDS = 1.0

    def __init__(self, model: str, may_copy: bool):
        self.model, self.may_copy = model, may_copy
        self.n, self.seconds, self.told = 0, 0.0, False

    def embedded(self, n: int, seconds: float) -> None:
        if self.told:
            return
        self.n, self.seconds = self.n + n, self.seconds + seconds
        if self.seconds >= self.SECONDS or self.n >= EMBED_BATCH:
            from pipekit.run.engine import tell

            self.told = True
            rate = self.n / max(self.seconds, 1e-9)
            tell(lambda left: forecast_line(self.model, left, rate, self.n, self.may_copy))


def vector_rows(spec: str, batches, first_chunk: int, sizes: list[int], heading_weight: int = 1,
                previous: str | None = None, windows: bool = True):
    """04_vectors.parquet's rows for a run of chunk batches (heading, text), numbered from
    `first_chunk`: each chunk's `chunk_text` (its heading weighted by `heading_repeats`),
    embedded a block at a time (`sizes`: the run's blocks, from `block_sizes`), whatever
    batches the rows arrive in; a block whose key the `previous` 04_vectors.parquet holds
    is copied from it (`Blocks`).  Each block comes as (its rows, how many were copied).
    Each chunk done moves the stage's progress bar (chunks, chunks/s, time left), and the
    first second of embedding gives stage 04's forecast (`Forecast`)."""
    import time

    from pipekit.run.engine import advance, advance_tokens

    model, repeats = load_model(spec), heading_repeats(spec, heading_weight)
    blocks = Blocks(spec, previous, windows)
    forecast = Forecast(WORDLLAMA if spec == WORDLLAMA else Path(spec).name, previous is not None)
    at, sizes = first_chunk, list(reversed(sizes))  # popped from the end: the next block last
    texts: list = []

    def embedded(n: int) -> tuple[pa.Table, int]:
        nonlocal at, texts, pairs
        key = blocks.key(texts[:n])
        found = blocks.find(key, n)
        reused = n if found is not None else 0
        if found is None:
            t0 = time.perf_counter()
            if isinstance(model, BertFolder) and windows:
                heads, bodies = zip(*pairs[:n])
                v, extra, owner, _ = model.embed_windows(list(heads), list(bodies), done=progress)
                later = windows_array(extra, owner, n, model.dim)
            elif isinstance(model, BertFolder):  # truncated (indexing.dense_windows false)
                v = model.stored(model.encode(texts[:n], model.document_prompt, done=progress))
                later = windows_array(np.zeros((0, model.dim), np.float32), np.zeros(0, np.int64), n, model.dim)
            else:
                v = model.embed(texts[:n], done=advance)
                later = windows_array(np.zeros((0, model.dim), np.float32), np.zeros(0, np.int64), n, model.dim)
            forecast.embedded(n, time.perf_counter() - t0)
        else:
            (v, later), _ = found, advance(n)
        texts, pairs = texts[n:], pairs[n:]
        table = pa.table({"chunk": pa.array(np.arange(at, at + n, dtype=np.int32)),
                          "vector": pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), model.dim),
                          "block": pa.array([key] * n, pa.string()), "windows": later},
                         schema=vectors_schema(model.dim))
        at += n
        return table, reused

    def progress(chunks: int, tokens: int) -> None:
        advance(chunks)
        advance_tokens(tokens)

    pairs: list = []
    for batch in batches:
        heads, bodies = batch.column("heading").to_pylist(), batch.column("text").to_pylist()
        texts += [chunk_text(h, t, repeats) for h, t in zip(heads, bodies)]
        pairs += list(zip(heads, bodies))
        while sizes and len(texts) >= sizes[-1]:
            yield embedded(sizes.pop())
    if texts or sizes:
        raise PipelineError(f"vector_rows: {len(texts)} chunks left over, {len(sizes)} blocks unfilled")


def read_vectors(path: Path, n_chunks: int) -> np.ndarray:
    """04_vectors.parquet as one (chunks, dim) float32 array, checked against the index."""
    from pipekit.run import io

    table = io.read_table(path, ["chunk", "vector"])
    col = table.column("vector").combine_chunks()
    if len(col) != n_chunks:
        raise PipelineError(f"{path}: {len(col):,} vectors for {n_chunks:,} chunks: rerun `python 04_indexing.py`")
    dim = col.type.list_size
    return np.ascontiguousarray(col.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim), dtype=np.float32)


def read_windows(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """04_vectors.parquet's later windows (`windows_of`), or None when it has none (a file
    from before windows, a model whose window every chunk fits)."""
    from pipekit.run import io

    try:
        col = io.read_table(path, ["windows"]).column("windows")
    except (KeyError, pa.ArrowInvalid, PipelineError):  # a file from before windows
        return None
    extra, owner = windows_of(col)
    return (extra, owner) if len(extra) else None
