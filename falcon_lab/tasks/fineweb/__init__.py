"""FineWeb-Edu language modelling (paper §5.1): GPT-2 BPE offline, llm.c token shards, batches."""

from falcon_lab.tasks.fineweb.batches import ShardSet, step_generator, train_batch, val_windows
from falcon_lab.tasks.fineweb.build import MANIFEST, PREFIX, build_shards, read_manifest
from falcon_lab.tasks.fineweb.parquet import COLUMNS, parquet_files
from falcon_lab.tasks.fineweb.shards import MAGIC, VERSION, find_shards, read_header, read_shard, shard_name, write_shard
from falcon_lab.tasks.fineweb.tokenizer import EOT, GPT2_PATTERN, encode_documents, file_sha256, load_tokenizer, read_ranks

__all__ = [
    "COLUMNS", "EOT", "GPT2_PATTERN", "MAGIC", "MANIFEST", "PREFIX", "VERSION", "ShardSet", "build_shards",
    "encode_documents", "file_sha256", "find_shards", "load_tokenizer", "parquet_files", "read_header",
    "read_manifest", "read_ranks", "read_shard", "shard_name", "step_generator", "train_batch", "val_windows",
    "write_shard",
]
