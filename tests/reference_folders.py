"""Tiny random-weight sentence-transformers folders of each kind this project runs, made the
same, byte for byte, on any machine: the folders the reference-equality test holds pipekit's
NumPy encoder to (tests/test_dense_reference.py).

Used twice: by the test, which builds them into a temporary folder, and by
bench/reference_vectors.py, run with a Python that has sentence-transformers and torch
(never a requirement of this project: CI would install gigabytes), which builds the same
folders, encodes TEXTS with sentence-transformers and writes the vectors, with a hash of the
folders' bytes, to tests/fixtures/reference_vectors.json.  The hash is how the test knows
the fixture was made from the folders it builds: change anything here and the test says to
run the bench script again, instead of comparing against vectors of other weights.

Needs only NumPy, safetensors and tokenizers (both in this project's requirements and in
sentence-transformers'); imports nothing from pipekit, so the other Python can use it.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

WORDS = ("change freeze deploy release friday backup restore nightly replication slot port queue result "
         "listen page paged on call alarm incident probe clock drift rejected flag feature owner review "
         "the a is of to and when who which why what how after where query passage document represent "
         "question for finding answer search : , . ? ##s ##ing ##ed").split()

# name -> (pooling, Normalize module, prompts, default prompt name, include_prompt, new-style pooling config)
KINDS = {
    "mean": ("mean", True, None, None, True, False),
    "cls": ("cls", True, None, None, True, False),
    "mean_unnormalised": ("mean", False, None, None, True, False),
    "cls_unnormalised": ("cls", False, None, None, True, False),
    "prompts": ("mean", True, {"query": "query: ", "passage": "passage: "}, None, True, False),
    "instruction": ("mean", True, {"query": "represent the question for finding the answer: ", "document": ""},
                    "query", False, True),
}
MAX_SEQ_LENGTH = 24  # short, so TEXTS' last one is truncated (and has windows)

TEXTS = [
    "when is the change freeze",
    "who owns the nightly backup and restore",
    "the replication slot is rejected after a clock drift",
    "page the on call owner when the alarm on the queue port is paged",
    "release after review : the feature flag , the deploy queue and the release owner ; "
    "the nightly backup , the restore probe , the replication slot and the clock drift alarm ; "
    "who is paged when a probe is rejected and how the incident review is done after friday",
]


def bert_weights(r, vocab: int, h: int, inter: int, layers: int) -> dict:
    """A BERT encoder's tensors by their Hugging Face names, each drawn by `r(*shape)` in a fixed
    order (so a seed gives the same bytes): the tiny folders here and tests/test_dense.py's."""
    w = {"embeddings.word_embeddings.weight": r(vocab, h), "embeddings.position_embeddings.weight": r(64, h),
         "embeddings.token_type_embeddings.weight": r(2, h),
         "embeddings.LayerNorm.weight": 1 + r(h), "embeddings.LayerNorm.bias": r(h)}
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for n in ("query", "key", "value"):
            w[p + f"attention.self.{n}.weight"], w[p + f"attention.self.{n}.bias"] = r(h, h), r(h)
        w[p + "attention.output.dense.weight"], w[p + "attention.output.dense.bias"] = r(h, h), r(h)
        w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"] = 1 + r(h), r(h)
        w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"] = r(inter, h), r(inter)
        w[p + "output.dense.weight"], w[p + "output.dense.bias"] = r(h, inter), r(h)
        w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"] = 1 + r(h), r(h)
    return w


def build(folder: Path, kind: str, seed: int = 7) -> Path:
    """The folder of `kind` (KINDS), its weights from `seed`: every file deterministic."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    pooling, normalize, prompts, default, include_prompt, new_style = KINDS[kind]
    folder.mkdir(parents=True, exist_ok=True)
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate(special + list(WORDS))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(folder / "tokenizer.json"))
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in vocab))
    dump = lambda name, obj: (folder / name).write_text(json.dumps(obj, indent=1, sort_keys=True))
    dump("tokenizer_config.json", {"tokenizer_class": "BertTokenizer", "do_lower_case": True,
                                   "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                                   "cls_token": "[CLS]", "mask_token": "[MASK]", "model_max_length": 512})
    dump("special_tokens_map.json", {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                                     "cls_token": "[CLS]", "mask_token": "[MASK]"})
    h, inter, layers, heads = 32, 64, 2, 4
    rng = np.random.default_rng([seed, list(KINDS).index(kind)])
    r = lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)
    w = bert_weights(r, len(vocab), h, inter, layers)
    save_file(w, str(folder / "model.safetensors"))
    dump("config.json", {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": h,
                         "num_attention_heads": heads, "num_hidden_layers": layers, "intermediate_size": inter,
                         "max_position_embeddings": 64, "layer_norm_eps": 1e-12, "vocab_size": len(vocab),
                         "hidden_act": "gelu", "type_vocab_size": 2, "pad_token_id": 0,
                         "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})
    (folder / "1_Pooling").mkdir(exist_ok=True)
    if new_style:
        pool = {"embedding_dimension": h, "pooling_mode": pooling, "include_prompt": include_prompt}
    else:
        pool = {"word_embedding_dimension": h, "pooling_mode_mean_tokens": pooling == "mean",
                "pooling_mode_cls_token": pooling == "cls", "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pool, indent=1, sort_keys=True))
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (folder / "2_Normalize").mkdir(exist_ok=True)
    dump("modules.json", modules)
    dump("sentence_bert_config.json", {"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False})
    st = {"similarity_fn_name": "cosine"}
    if prompts:
        st.update(prompts=prompts, default_prompt_name=default)
    dump("config_sentence_transformers.json", st)
    return folder


def folder_hash(folder: Path) -> str:
    """BLAKE2b of every file of the folder, by relative path (what the fixture was made from)."""
    h = hashlib.blake2b(digest_size=16)
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def prompts_of(kind: str) -> dict[str, str]:
    """The prompts the reference is encoded with, by name ("" for none): each kind's own."""
    prompts = KINDS[kind][2] or {}
    return {"": "", **prompts}
