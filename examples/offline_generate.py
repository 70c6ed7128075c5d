"""Offline generation with the Python API: a batch, a stream, and a cancelled stream.
Usage: python3 examples/offline_generate.py MODEL_DIR"""
import sys

from deepinfer import LLM, SamplingParams


def main(model):
    llm = LLM(model=model)
    prompts = [[0, 10, 20, 30], [0, 42], [0, 7, 7, 7]]
    params = [
        SamplingParams(temperature=0, max_tokens=8),
        SamplingParams(temperature=0.8, top_p=0.9, seed=1234, max_tokens=8),
        SamplingParams(top_k=20, repetition_penalty=1.2, seed=99, max_tokens=8, logprobs=2),
    ]
    for out in llm.generate(prompts, params):
        print(f"request {out.request_id}: {out.finish_reason}, tokens {out.token_ids}")
        assert out.finish_reason in ("length", "finished"), out

    for event in llm.stream([0, 1, 2, 3], SamplingParams(seed=7, max_tokens=6)):
        print("stream:", f"finish {event.reason.name}" if event.terminal else f"token {event.token_ids[0]}")

    stream = llm.stream([0, 1, 2, 3], SamplingParams(max_tokens=1000, ignore_eos=True))
    next(stream)
    stream.cancel()
    last = list(stream)[-1]
    print("cancelled stream:", last.reason.name)
    assert last.reason.name == "cancelled"


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/golden/fixtures/v4_tiny")
