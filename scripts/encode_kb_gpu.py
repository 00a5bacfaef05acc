"""Encode the benchmark's knowledge base with a sentence-transformers model on a GPU machine.

How the all-mpnet-base-v2 vectors behind ``docs/results/calibration/README.md`` were made
(2026-11-27, one H200, 67 s): the machine has no network, so the model and the knowledge base travel
with the call, at most ~60 MB a call. Here: save the model's weights as float16 (floating tensors
only; cosine .9999995 with the float32 model), split the file into chunks under 57 MB, gzip
``kb.jsonl``; send the config files, ``kb.jsonl.gz`` and one chunk per call into one folder
(``--parts``) on the warm machine, then run this script there with ``OUT`` set::

    python3 scripts/encode_kb_gpu.py --parts /root/mp --config /root/mp/cfg \\
        --kb /root/mp/kb.jsonl.gz --out "$OUT"

It writes ``kb_vectors_<i>.npz`` (``ids``, ``text_sha1``, ``E`` as float16), each under
16 MiB. Joined and sorted by id, they form a seed file for ``python -m benchmarks run
--embedder mpnet --seed-npz FILE``; the harness re-encodes a random sample on the CPU and
takes the seed only if every sampled vector agrees.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", type=Path, required=True, help="folder of part_* weight chunks")
    ap.add_argument("--config", type=Path, required=True, help="the model folder minus weights")
    ap.add_argument("--kb", type=Path, required=True, help="kb.jsonl.gz of the benchmark")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--files", type=int, default=4, help="output files (each under 16 MiB)")
    args = ap.parse_args()

    import torch
    from safetensors.torch import load_file, save_file
    from sentence_transformers import SentenceTransformer

    t0 = time.time()
    joined = args.parts / "model16.safetensors"
    with joined.open("wb") as out:
        for part in sorted(glob.glob(str(args.parts / "part_*"))):
            out.write(Path(part).read_bytes())
    model_dir = args.parts / "model"
    shutil.copytree(args.config, model_dir, dirs_exist_ok=True)
    weights = load_file(str(joined))
    save_file({k: (v.float() if v.is_floating_point() else v).contiguous()
               for k, v in weights.items()}, str(model_dir / "model.safetensors"))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = SentenceTransformer(str(model_dir), device="cuda").float()
    with gzip.open(args.kb, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    texts = [r["text"] for r in rows]
    order = np.argsort([len(t) for t in texts])  # similar lengths batch together
    vectors = np.zeros((len(texts), model.get_sentence_embedding_dimension()), np.float32)
    vectors[order] = model.encode([texts[i] for i in order], batch_size=128,
                                  normalize_embeddings=True, convert_to_numpy=True)
    ids = np.array([r["id"] for r in rows])
    sha = np.array([hashlib.sha1(t.encode("utf-8")).hexdigest()[:16] for t in texts])
    step = -(-len(texts) // args.files)
    args.out.mkdir(parents=True, exist_ok=True)
    for i in range(args.files):
        part = slice(i * step, (i + 1) * step)
        np.savez(args.out / f"kb_vectors_{i}.npz", ids=ids[part], text_sha1=sha[part],
                 E=vectors[part].astype(np.float16))
    print(vectors.shape, model.max_seq_length, f"{time.time() - t0:.1f} s", torch.__version__)


if __name__ == "__main__":
    main()
