"""Write the calibration trace measured on llama.cpp (data/measured/llamacpp_calib.trace.jsonl).

Mooncake JSONL, 512-token hash-id blocks. Three sets; in each, for every prompt length L in
512, 1024, 2048, 4096, 7488 (shuffled, seeded): a fresh prompt A of L tokens (a miss), then
B = A + one new block (a prefix hit on all of A, 512 tokens to compute; lengths up to 8000).
No prompt shares blocks with anything but its own pair, and B always follows A, so an engine
that keeps only the last request's context (llama.cpp without a RAM cache) and one that keeps
many blocks (vLLM) hit the same prefixes. Timestamps are 10 s apart (measure --rate replaces
them). Usage: python scripts/calib_trace.py OUT
"""

import json
import random
import sys

LENGTHS = (512, 1024, 2048, 4096, 7488)
BLOCK, SETS, OUTPUT_TOKENS = 512, 3, 8


def main(path: str) -> None:
    rng = random.Random(20261201)
    lines, next_id = [], 1
    for _ in range(SETS):
        for length in rng.sample(LENGTHS, len(LENGTHS)):
            blocks = -(-length // BLOCK)
            ids = list(range(next_id, next_id + blocks + 1))
            next_id += blocks + 1
            lines.append({"input_length": length, "output_length": OUTPUT_TOKENS,
                          "hash_ids": ids[:blocks]})
            lines.append({"input_length": length + BLOCK, "output_length": OUTPUT_TOKENS,
                          "hash_ids": ids})
    with open(path, "w", encoding="utf-8") as out:
        for index, line in enumerate(lines):
            out.write(json.dumps({"timestamp": index * 10_000, **line}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
