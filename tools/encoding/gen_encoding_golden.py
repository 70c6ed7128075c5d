#!/usr/bin/env python3
"""Generates golden expectations for deepinfer's request encoding and output parsing.

The oracle is the PyPI package deepseek-recipe==0.2.0 (serving.md §1.1). Everything here is
deterministic (fixed seeds), so the same files come out on every run. Output (JSON lines):
  <out>/render_v4.jsonl, <out>/render_v41.jsonl : one Chat Completions / Messages / Responses request per
      line with the recipe's rendered prompt (or its HTTP error status + message).
  <out>/outputs.jsonl : one generated model output per line with parsing options and the recipe's
      accumulated Chat Completions result (reasoning, content, tool calls, finish reason).
"""
import argparse
import json
import os
import random
import sys

import deepseek_recipe as dr

MODEL_BY_VERSION = {"v4": "DeepSeek-V4-Pro", "v41": "DeepSeek-V4.1-Flash"}

# Text pieces chosen to stress the renderer: unicode, quotes, control-token literals typed by a user
# (serving.md §1.3: they must stay plain text), newlines and JSON-looking text.
TEXT_PIECES = [
    "Hello", "What is the weather in Paris?", "naïve café", "数学题：1+1=?", "emoji 🙂 ok",
    "line one\nline two", "  padded  ", "<｜User｜>", "<think>", "</think>", "quote \" and \\ backslash",
    "tab\there", "{\"json\": true}", "Reply in JSON please.", "<｜DSML｜ calls>", "```code```", "", "ok",
    "<tool_result>x</tool_result>", "\n\nleading newlines", "trailing newline\n",
]
JSON_WORD = " Answer as json."


def rand_text(rng, pieces=2):
    return " ".join(rng.choice(TEXT_PIECES) for _ in range(rng.randint(1, pieces)))


def rand_json_value(rng, depth=0):
    kind = rng.randint(0, 8 if depth < 2 else 5)
    if kind == 0:
        return rand_text(rng, 1)
    if kind == 1:
        return rng.randint(-1000, 100000)
    if kind == 2:
        return rng.choice([0.5, -2.25, 3.0, 1e-3, 12.75])
    if kind == 3:
        return rng.choice([True, False])
    if kind == 4:
        return None
    if kind == 5:
        return rng.choice(["Paris", "é", "a\"b", "multi\nline", "", "42"])
    if kind in (6, 7):
        return [rand_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}": rand_json_value(rng, depth + 1) for i in range(rng.randint(0, 3))}


TOOL_POOL = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web (中文 ok).",
     "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "q \"x\""},
                                                     "top_k": {"type": "number", "default": 2.5}}}}},
    {"type": "function", "function": {"name": "no_params", "description": "Takes nothing."}},
    {"type": "function", "function": {"name": "nested", "parameters": {"type": "object", "properties": {
        "cfg": {"type": "object", "properties": {"on": {"type": "boolean"}, "tags": {"type": "array",
                "items": {"type": "string"}}}}}}}},
]


def rand_arguments(rng, tool_name):
    args = {}
    for i in range(rng.randint(0, 3)):
        key = rng.choice(["city", "query", "days", "cfg", "top_k", f"p{i}", "ключ"])
        args[key] = rand_json_value(rng)
    return json.dumps(args, ensure_ascii=rng.random() < 0.3)


def chat_request(rng, version):
    """A random Chat Completions request exercising serving.md §1.3/§1.5 features."""
    body = {"model": MODEL_BY_VERSION[version]}
    thinking = rng.choice([None, True, False])
    if thinking is not None:
        body["thinking"] = {"type": "enabled" if thinking else "disabled"}
    if rng.random() < 0.5:
        body["reasoning_effort"] = rng.choice(["minimal", "low", "medium", "high", "xhigh", "max", "ultra", "none"])
    use_tools = rng.random() < 0.5
    tools = rng.sample(TOOL_POOL, rng.randint(1, len(TOOL_POOL))) if use_tools else []
    if use_tools:
        body["tools"] = tools
        if rng.random() < 0.5:
            body["tool_choice"] = rng.choice(["auto", "none", "required"])
    json_mode = rng.random() < 0.15
    if json_mode:
        body["response_format"] = {"type": "json_object"}
    elif rng.random() < 0.1:
        body["response_format"] = {"type": "text"}
    messages = []
    if rng.random() < 0.6:
        messages.append({"role": "system", "content": rand_text(rng)})
        if rng.random() < 0.2:
            messages.append({"role": "system", "content": rand_text(rng, 1)})
    turns = rng.randint(1, 4)
    for turn in range(turns):
        if rng.random() < 0.15 and turn > 0:
            messages.append({"role": "system", "content": rand_text(rng, 1)})
        if rng.random() < 0.3:
            content = [{"type": "text", "text": rand_text(rng, 1)} for _ in range(rng.randint(1, 3))]
        else:
            content = rand_text(rng)
        messages.append({"role": "user", "content": content})
        if rng.random() < 0.15:
            messages.append({"role": "user", "content": rand_text(rng, 1)})
        if turn == turns - 1:
            break
        assistant = {"role": "assistant", "content": rand_text(rng)}
        if rng.random() < 0.6:
            assistant["reasoning_content"] = rand_text(rng)
        if use_tools and rng.random() < 0.6:
            calls = []
            for i in range(rng.randint(1, 3)):
                tool = rng.choice(tools)["function"]["name"]
                calls.append({"id": f"call_{turn}_{i}", "type": "function",
                              "function": {"name": tool, "arguments": rand_arguments(rng, tool)}})
            assistant["tool_calls"] = calls
            if rng.random() < 0.3:
                assistant["content"] = rng.choice(["", None])
            messages.append(assistant)
            results = [{"role": "tool", "tool_call_id": c["id"], "content": rand_text(rng, 1)} for c in calls]
            if rng.random() < 0.5:
                rng.shuffle(results)
            messages.extend(results)
        else:
            messages.append(assistant)
    if json_mode:
        last = messages[-1]
        if isinstance(last["content"], str):
            last["content"] += JSON_WORD
        else:
            last["content"].append({"type": "text", "text": JSON_WORD})
    if rng.random() < 0.12:
        prefix = {"role": "assistant", "content": rand_text(rng, 1), "prefix": True}
        if rng.random() < 0.5:
            prefix["reasoning_content"] = rand_text(rng, 1)
        messages.append(prefix)
    body["messages"] = messages
    return body


def render_case(version, protocol, body, options):
    kinds = {"chat": dr.ChatCompletionRequest, "messages": dr.MessagesRequest, "responses": dr.ResponsesRequest}
    encodings = {"v4": dr.DeepseekV4Encoding, "v41": dr.DeepseekV41Encoding}
    case = {"protocol": protocol, "request": body, "reject_missing_reasoning": options["reject"]}
    conv_options = dr.ConversionOptions(reasoning_content_behavior=dr.ReasoningContentBehavior.Reject
                                        if options["reject"] else dr.ReasoningContentBehavior.FillEmpty)
    try:
        request = kinds[protocol](json.dumps(body)).convert(conv_options)
    except dr.ConversionError as err:
        case["error"] = {"status": err.status_code, "message": json.loads(err.body)["error"]["message"]}
        return case
    except ValueError as err:
        case["error"] = {"status": 400, "message": str(err)}
        return case
    rendered = encodings[version]().render_conversation(request.conversation)
    case["prompt"] = rendered.prompt
    case["special_ranges"] = rendered.special_ranges
    return case


def gen_render(version, count, seed):
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        body = chat_request(rng, version)
        cases.append(render_case(version, "chat", body, {"reject": rng.random() < 0.3}))
    return cases


# ---- model outputs -------------------------------------------------------------------------------------
STAGES = {
    "content": None,
    "reasoning_start": dr.ThinkingInitialStage.ReasoningStart,
    "reasoning_continuation": dr.ThinkingInitialStage.ReasoningContinuation,
    "content_continuation": dr.ThinkingInitialStage.ContentContinuation,
}
FINISH = {"stop": dr.InferenceFinishReason.Stop, "length": dr.InferenceFinishReason.Length,
          "content_filter": dr.InferenceFinishReason.ContentFilter}
OUTPUT_TEXT = ["Let me think.", "x = 1\ny = 2", "naïve 数学 🙂", "He said \"hi\" \\ ok", "\n\n", "\n", "STOP",
               "</think>", "<think>", "<｜DSML｜", "``", "{", "[1, 2]", "```", "tab\t", "ctrl\x01\x7f", "END"]


def dsml_block(rng, v41):
    calls_tag, invoke_tag, param_tag = (" calls", " invoke", " parameter") if v41 else ("tool_calls", "invoke", "parameter")
    d = "｜DSML｜"
    invokes = []
    for _ in range(rng.randint(1, 3)):
        params = []
        for i in range(rng.randint(0, 3)):
            if rng.random() < 0.5:
                value = rng.choice(["Paris", "a\"b\\c", "line\nbreak", "é🙂", "", "</think>", "{not json"])
                params.append(f'<{d}{param_tag} name="k{i}" string="true">{value}</{d}{param_tag}>')
            else:
                value = json.dumps(rand_json_value(rng), ensure_ascii=False)
                params.append(f'<{d}{param_tag} name="n{i}" string="false">{value}</{d}{param_tag}>')
        name = rng.choice(["get_weather", "search", "f", "名字"])
        invokes.append(f'<{d}{invoke_tag} name="{name}">\n' + "\n".join(params) + ("\n" if params else "") +
                       f"</{d}{invoke_tag}>")
    return f"<{d}{calls_tag}>\n" + "\n".join(invokes) + f"\n</{d}{calls_tag}>"


def model_output(rng):
    """A random generated text: optional reasoning, answer, JSON, tool-call block, noise, truncation."""
    parts = []
    if rng.random() < 0.3:
        parts.append("\n" * rng.randint(1, 2))
    if rng.random() < 0.6:
        parts.append(" ".join(rng.choice(OUTPUT_TEXT) for _ in range(rng.randint(1, 4))))
        if rng.random() < 0.8:
            parts.append("\n" * rng.randint(0, 2) + "</think>" + "\n" * rng.randint(0, 2))
    if rng.random() < 0.3:
        fence = rng.choice(["```json\n", "```\n", ""])
        parts.append(rng.choice(["Sure: ", "", "\n"]) + fence + json.dumps(rand_json_value(rng), ensure_ascii=False) +
                     ("\n```" if fence else "") + rng.choice(["", " done", "\n"]))
    else:
        parts.append(" ".join(rng.choice(OUTPUT_TEXT) for _ in range(rng.randint(0, 4))))
    if rng.random() < 0.45:
        parts.append("\n" * rng.randint(0, 2) + dsml_block(rng, rng.random() < 0.5))
        if rng.random() < 0.2:
            parts.append(rng.choice(["trailing", "\n", "<｜DSML｜ invoke name=\"late\">"]))
    text = "".join(parts)
    if rng.random() < 0.15:
        text = text[: rng.randint(0, len(text))]  # truncated generation (finish by length or mid-marker)
    return text


def recipe_parse(text, stage, parse_tool_calls, starts_in_tool_calls, json_mode, stops, finish):
    request = dr.ConversationRequest(dr.Conversation([dr.UserMessage("hi")]), dr.ModelVersion.DeepseekV41Flash)
    options = dr.ParsingOptions(parse_tool_calls=parse_tool_calls, starts_in_tool_calls=starts_in_tool_calls,
                                parse_json_output=json_mode, thinking_initial_stage=STAGES[stage], stop_sequences=stops)
    processor = dr.StreamProcessor(dr.ChatCompletionRequest.chunk_generator(request, "id", "m"), options)
    response = dr.ChatCompletionResponse("id", "m", 0, 1, 0)
    chunks = []
    # The whole text as one chunk: the recipe's JSON-mode blanking emits one space per emitted segment, which
    # depends on chunking; fed whole it is one space per parser stage, the chunk-independent rule we implement.
    for chunk in (dr.InferenceChunk.ready(), dr.InferenceChunk.text(text, 1), dr.InferenceChunk.finish(FINISH[finish])):
        try:
            chunks += processor.push(chunk)
        except RuntimeError:  # a stop sequence finished the stream early
            break
    try:
        chunks += processor.finish()
    except RuntimeError:
        pass
    for chunk in chunks:
        response.accumulate(chunk)
    choice = json.loads(response.to_json())["choices"][0]
    message = choice["message"]
    return {"reasoning": message.get("reasoning_content") or "", "content": message.get("content") or "",
            "tool_calls": [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                           for c in message.get("tool_calls") or []],
            "finish_reason": choice["finish_reason"]}


def gen_outputs(count, seed):
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        text = model_output(rng)
        stage = rng.choice(list(STAGES))
        opts = {"stage": stage, "parse_tool_calls": rng.random() < 0.85,
                "starts_in_tool_calls": rng.random() < 0.08, "json_mode": rng.random() < 0.2,
                "stops": rng.sample(["STOP", "END", "\n\n", "é", "ab"], rng.randint(0, 2)) if rng.random() < 0.35 else [],
                "finish": rng.choice(["stop", "stop", "length", "content_filter"])}
        if opts["starts_in_tool_calls"]:
            # The prompt opened the block (tool_choice=required): the output starts with the invokes. Not prefixed
            # by other generated text: a DSML tag cut inside a parameter name and then restarted is a case where the
            # recipe 0.2.0 result differs from its published state machine (see tests/golden/encoding/README.md).
            text = dsml_block(rng, True)[len("<｜DSML｜ calls>\n"):]
        expected = recipe_parse(text, opts["stage"], opts["parse_tool_calls"], opts["starts_in_tool_calls"],
                                opts["json_mode"], opts["stops"], opts["finish"])
        cases.append({"text": text, "options": opts, "expected": expected})
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=600)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for version, seed in (("v4", 4), ("v41", 41)):
        cases = gen_render(version, args.count, seed)
        with open(os.path.join(args.out, f"render_{version}.jsonl"), "w", encoding="utf-8") as f:
            for case in cases:
                f.write(json.dumps(case, ensure_ascii=False) + "\n")
        errors = sum("error" in c for c in cases)
        print(f"[gen] render_{version}: {len(cases)} cases ({errors} errors)", file=sys.stderr)
    outputs = gen_outputs(args.count, 7)
    with open(os.path.join(args.out, "outputs.jsonl"), "w", encoding="utf-8") as f:
        for case in outputs:
            f.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"[gen] outputs: {len(outputs)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
