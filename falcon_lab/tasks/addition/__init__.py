"""Variable-length addition (paper §5.2): vocabulary, sample generation, jsonl splits, batches, metrics."""

from falcon_lab.tasks.addition.batches import (
    IGNORE_INDEX,
    AdditionBatch,
    AdditionStream,
    SampleSpan,
    make_batch,
    pack_rows,
    positions_needed,
    sample_tokens,
)
from falcon_lab.tasks.addition.generate import (
    DEFAULT_DIGITS,
    DEFAULT_N_PER_LENGTH,
    SPLITS,
    derive_seed,
    generate_records,
    make_record,
    sample_record,
    validate_record,
)
from falcon_lab.tasks.addition.jsonl import read_jsonl, write_jsonl
from falcon_lab.tasks.addition.metrics import (
    SuffixAccuracy,
    free_running_check,
    labelled_correct,
    per_width_accuracy,
    prompt_ids,
    span_correct,
    suffix_accuracy,
    summarise,
    target_position_correct,
    teacher_forced_batch,
)
from falcon_lab.tasks.addition.vocab import BOS, EOS, PAD, VOCAB_SIZE, decode, encode

__all__ = [
    "BOS", "DEFAULT_DIGITS", "DEFAULT_N_PER_LENGTH", "EOS", "IGNORE_INDEX", "PAD", "SPLITS",
    "VOCAB_SIZE", "AdditionBatch", "AdditionStream", "SampleSpan", "SuffixAccuracy", "decode",
    "derive_seed", "encode", "free_running_check", "generate_records", "labelled_correct", "make_batch", "make_record",
    "pack_rows", "per_width_accuracy", "positions_needed", "prompt_ids", "read_jsonl",
    "sample_record", "sample_tokens", "span_correct", "suffix_accuracy", "summarise",
    "target_position_correct", "teacher_forced_batch", "validate_record", "write_jsonl",
]
