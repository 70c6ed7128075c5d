"""deepinfer: offline inference for DeepSeek V4 / V4.1.

    from deepinfer import LLM, SamplingParams
    llm = LLM(model="tests/golden/fixtures/v4_tiny")
    outs = llm.generate([[0, 10, 20]], SamplingParams(temperature=0.8, seed=1, max_tokens=8))
    for event in llm.stream([0, 10, 20], SamplingParams(max_tokens=8)):
        print(event.token_ids, event.text_delta)

A prompt is a list of token ids, or a string when a tokenizer.json is given (``LLM(model, tokenizer=...)``).
The engine runs on its own thread; every request ends with exactly one terminal event.
"""

import json as _json

from . import _core
from ._core import DeepinferError, Event, FinishReason, RequestOutput  # noqa: F401

__all__ = ["LLM", "SamplingParams", "RequestOutput", "Event", "FinishReason", "DeepinferError"]

_SAMPLING_FIELDS = (
    "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
    "max_tokens", "stop_token_ids", "stop", "ignore_eos", "logprobs", "seed",
)


def SamplingParams(**kwargs):
    """Sampling parameters (see include/deepinfer/sampling_params.h); unknown names raise TypeError."""
    params = _core.SamplingParams()
    for name, value in kwargs.items():
        if name not in _SAMPLING_FIELDS:
            raise TypeError(f"SamplingParams: unknown parameter '{name}' (known: {', '.join(_SAMPLING_FIELDS)})")
        if name == "stop" and isinstance(value, str):
            value = [value]
        setattr(params, name, value)
    return params


def _split_prompt(prompt):
    if isinstance(prompt, str):
        return [], prompt
    return [int(t) for t in prompt], ""


class LLM:
    """An engine over one model directory. Keyword options map onto EngineOptions (max_batch_tokens,
    max_num_seqs, prefill_chunk, state_memory_bytes, batch_invariant, seed, numerics, ...); the
    DEEPINFER_* environment variables are applied first."""

    def __init__(self, model, tokenizer=None, **options):
        opts = _core.options_from_env(_core.EngineOptions())
        opts.model = str(model)
        if tokenizer:
            opts.tokenizer = str(tokenizer)
        for name, value in options.items():
            if not hasattr(opts, name):
                raise TypeError(f"LLM: unknown engine option '{name}'")
            setattr(opts, name, value)
        self._engine = _core.Engine(opts)

    @property
    def engine(self):
        return self._engine

    def generate(self, prompts, sampling_params=None):
        """Generates for one prompt or a list of prompts; returns one RequestOutput per prompt, in order.
        sampling_params: one SamplingParams for all, or a list with one per prompt."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        if sampling_params is None:
            sampling_params = SamplingParams()
        if not isinstance(sampling_params, (list, tuple)):
            sampling_params = [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError("generate: sampling_params must be one value or one per prompt")
        ids, texts = zip(*(_split_prompt(p) for p in prompts)) if prompts else ((), ())
        return self._engine.generate(list(ids), list(texts), list(sampling_params))

    def stream(self, prompt, sampling_params=None):
        """Returns an iterator over the events of one request (token events, then one terminal event).
        The iterator has .cancel() and .handle."""
        ids, text = _split_prompt(prompt)
        return self._engine.submit(ids, text, sampling_params or SamplingParams())

    def chat(self, messages, sampling_params=None, thinking=False):
        """Chat with the model's own template (needs a tokenizer). messages: [{"role", "content"}, ...].
        Returns a dict with the reasoning, the answer, the finish reason and the RequestOutput."""
        if not self._engine.has_tokenizer:
            raise DeepinferError("chat: needs a tokenizer (LLM(model, tokenizer='.../tokenizer.json'))")
        ids = self._engine.encode_chat(_json.dumps(list(messages)), thinking)
        out = self.generate([ids], sampling_params or SamplingParams())[0]
        reasoning, content = self._engine.parse_chat(out.text, thinking)
        return {"reasoning": reasoning, "content": content, "finish_reason": out.finish_reason, "output": out}
