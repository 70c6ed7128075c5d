// deepinfer._core: pybind11 bindings of the public C++ API (include/deepinfer/). The friendly Python layer
// (LLM, streaming iterator, chat) lives in python/deepinfer/__init__.py. Blocking calls release the GIL;
// the model only ever runs on the engine's own thread.
#ifdef DEEPINFER_WITH_CUDA
#include "model/gpu/backend.h"
#endif
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "deepinfer/engine.h"

namespace py = pybind11;
using namespace deepinfer;

PYBIND11_MODULE(_core, m) {
#ifdef DEEPINFER_WITH_CUDA
  deepinfer::gpu::register_cuda_backend();  // LLM(model, device="cuda")
#endif
  m.doc() = "deepinfer engine bindings (see the deepinfer package for the LLM API)";
  py::register_exception<Error>(m, "DeepinferError", PyExc_ValueError);

  py::enum_<FinishReason>(m, "FinishReason")
      .value("none", FinishReason::None)
      .value("finished", FinishReason::Finished)
      .value("stopped", FinishReason::Stopped)
      .value("length", FinishReason::Length)
      .value("cancelled", FinishReason::Cancelled)
      .value("rejected", FinishReason::Rejected)
      .value("error", FinishReason::Error);
  m.def("finish_reason_name", &finish_reason_name);

  py::class_<StructuredOutput>(m, "StructuredOutput")
      .def(py::init<>())
      .def_readwrite("json_schema", &StructuredOutput::json_schema)
      .def_readwrite("regex", &StructuredOutput::regex)
      .def_readwrite("ebnf", &StructuredOutput::ebnf)
      .def_readwrite("json_object", &StructuredOutput::json_object)
      .def_readwrite("tools", &StructuredOutput::tools)
      .def_readwrite("tool_choice", &StructuredOutput::tool_choice)
      .def_readwrite("tool_block_in_prompt", &StructuredOutput::tool_block_in_prompt)
      .def_readwrite("dsml_version", &StructuredOutput::dsml_version)
      .def_readwrite("any_whitespace", &StructuredOutput::any_whitespace)
      .def_readwrite("after_think", &StructuredOutput::after_think)
      .def_property_readonly("active", &StructuredOutput::active);

  py::class_<SamplingParams>(m, "SamplingParams")
      .def(py::init<>())
      .def_readwrite("temperature", &SamplingParams::temperature)
      .def_readwrite("top_p", &SamplingParams::top_p)
      .def_readwrite("top_k", &SamplingParams::top_k)
      .def_readwrite("min_p", &SamplingParams::min_p)
      .def_readwrite("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_readwrite("presence_penalty", &SamplingParams::presence_penalty)
      .def_readwrite("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_readwrite("max_tokens", &SamplingParams::max_tokens)
      .def_readwrite("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_readwrite("stop", &SamplingParams::stop)
      .def_readwrite("ignore_eos", &SamplingParams::ignore_eos)
      .def_readwrite("logprobs", &SamplingParams::logprobs)
      .def_readwrite("seed", &SamplingParams::seed)
      .def_readwrite("structured", &SamplingParams::structured);

  py::class_<TopLogprob>(m, "TopLogprob")
      .def_readonly("token_id", &TopLogprob::token_id)
      .def_readonly("logprob", &TopLogprob::logprob);
  py::class_<TokenLogprob>(m, "TokenLogprob")
      .def_readonly("token_id", &TokenLogprob::token_id)
      .def_readonly("logprob", &TokenLogprob::logprob)
      .def_readonly("top", &TokenLogprob::top);

  py::class_<Event>(m, "Event")
      .def_property_readonly("terminal", &Event::terminal)
      .def_readonly("request_id", &Event::request_id)
      .def_readonly("token_ids", &Event::token_ids)
      .def_property_readonly("text_delta",
                             [](const Event& e) { return py::str(PyUnicode_DecodeUTF8(e.text_delta.data(), Py_ssize_t(e.text_delta.size()), "replace")); })
      .def_readonly("logprobs", &Event::logprobs)
      .def_readonly("reason", &Event::reason)
      .def_readonly("message", &Event::message)
      .def("__repr__", [](const Event& e) {
        return "Event(request_id=" + std::to_string(e.request_id) + ", tokens=" + std::to_string(e.token_ids.size()) +
               (e.terminal() ? std::string(", finish=") + finish_reason_name(e.reason) : std::string()) + ")";
      });

  py::class_<RequestOutput>(m, "RequestOutput")
      .def_readonly("request_id", &RequestOutput::request_id)
      .def_readonly("prompt_token_ids", &RequestOutput::prompt_token_ids)
      .def_readonly("token_ids", &RequestOutput::token_ids)
      .def_property_readonly("text",
                             [](const RequestOutput& o) { return py::str(PyUnicode_DecodeUTF8(o.text.data(), Py_ssize_t(o.text.size()), "replace")); })
      .def_readonly("logprobs", &RequestOutput::logprobs)
      .def_property_readonly("finish_reason", [](const RequestOutput& o) { return std::string(finish_reason_name(o.finish_reason)); })
      .def_readonly("message", &RequestOutput::message)
      .def("__repr__", [](const RequestOutput& o) {
        return "RequestOutput(request_id=" + std::to_string(o.request_id) + ", tokens=" +
               std::to_string(o.token_ids.size()) + ", finish_reason=" + finish_reason_name(o.finish_reason) + ")";
      });

  py::enum_<PrefillTruncationMode>(m, "PrefillTruncationMode")
      .value("exact", PrefillTruncationMode::Exact)
      .value("decoder_tail", PrefillTruncationMode::DecoderTail);

  py::class_<EngineOptions>(m, "EngineOptions")
      .def(py::init<>())
      .def_readwrite("model", &EngineOptions::model)
      .def_readwrite("tokenizer", &EngineOptions::tokenizer)
      .def_readwrite("numerics", &EngineOptions::numerics)
      .def_readwrite("show_progress", &EngineOptions::show_progress)
      .def_readwrite("max_batch_tokens", &EngineOptions::max_batch_tokens)
      .def_readwrite("max_num_seqs", &EngineOptions::max_num_seqs)
      .def_readwrite("prefill_chunk", &EngineOptions::prefill_chunk)
      .def_readwrite("state_memory_bytes", &EngineOptions::state_memory_bytes)
      .def_readwrite("max_waiting", &EngineOptions::max_waiting)
      .def_readwrite("threaded", &EngineOptions::threaded)
      .def_readwrite("async_scheduling", &EngineOptions::async_scheduling)
      .def_readwrite("batch_invariant", &EngineOptions::batch_invariant)
      .def_readwrite("prefill_truncation", &EngineOptions::prefill_truncation)
      .def_readwrite("prefill_keep_tokens", &EngineOptions::prefill_keep_tokens)
      .def_readwrite("seed", &EngineOptions::seed)
      .def_readwrite("device", &EngineOptions::device)
      .def_readwrite("max_model_len", &EngineOptions::max_model_len)
      .def_readwrite("random_weights", &EngineOptions::random_weights)
      .def_readwrite("data_parallel", &EngineOptions::data_parallel)
      .def_readwrite("expert_parallel", &EngineOptions::expert_parallel)
      .def_readwrite("eplb_window_steps", &EngineOptions::eplb_window_steps)
      .def_readwrite("eplb_redundant_experts", &EngineOptions::eplb_redundant_experts)
      .def_readwrite("eplb_rebalance_steps", &EngineOptions::eplb_rebalance_steps)
      .def_readwrite("eplb_rebalance_min_gain", &EngineOptions::eplb_rebalance_min_gain)
      // `deepinfer launch --nproc N -- python script.py`: rank 0 submits, the others call Engine.serve().
      .def_readwrite("process_group", &EngineOptions::process_group);
  m.def("options_from_env", [](const EngineOptions& base) { return EngineOptions::from_env(base); });

  py::class_<RequestHandle>(m, "RequestHandle")
      .def_readonly("id", &RequestHandle::id)
      .def_readonly("slot", &RequestHandle::slot)
      .def_readonly("generation", &RequestHandle::generation);

  py::class_<RequestStream>(m, "RequestStream")
      .def_property_readonly("handle", &RequestStream::handle)
      .def_property_readonly("done", &RequestStream::done)
      .def("cancel", &RequestStream::cancel)
      .def("collect", &RequestStream::collect, py::call_guard<py::gil_scoped_release>())
      .def("__iter__", [](RequestStream& s) -> RequestStream& { return s; })
      .def("__next__", [](RequestStream& s) {
        Event e;
        bool got;
        {
          py::gil_scoped_release release;
          got = s.next(e);
        }
        if (!got) throw py::stop_iteration();
        return e;
      });

  py::class_<Engine>(m, "Engine")
      .def(py::init([](const EngineOptions& o) {
             py::gil_scoped_release release;
             return Engine::create(o);
           }),
           py::arg("options"))
      // The stream keeps the engine alive (keep_alive<0, 1>): a stream never outlives its engine.
      .def("submit",
           [](Engine& e, std::vector<int32_t> ids, std::string text, const SamplingParams& p) {
             Request r{std::move(ids), std::move(text), p};
             return e.submit(std::move(r));
           },
           py::arg("prompt_token_ids"), py::arg("prompt"), py::arg("params"), py::keep_alive<0, 1>())
      .def("cancel", &Engine::cancel)
      .def("generate",
           [](Engine& e, std::vector<std::vector<int32_t>> ids, std::vector<std::string> texts,
              std::vector<SamplingParams> params) {
             std::vector<Request> reqs;
             for (size_t i = 0; i < params.size(); ++i) reqs.push_back({ids[i], texts[i], params[i]});
             py::gil_scoped_release release;
             return e.generate(std::move(reqs));
           })
      .def_property_readonly("vocab_size", &Engine::vocab_size)
      .def_property_readonly("eos_token_id", &Engine::eos_token_id)
      .def_property_readonly("max_model_len", &Engine::max_model_len)
      .def_property_readonly("has_tokenizer", &Engine::has_tokenizer)
      // process_group: this process's rank (0 without a process group); ranks > 0 serve rank 0's requests until
      // rank 0's engine stops (serve returns at once without a process group).
      .def_property_readonly("group_rank", &Engine::group_rank)
      .def("serve", &Engine::serve, py::call_guard<py::gil_scoped_release>())
      .def("encode", &Engine::encode, py::arg("text"), py::arg("allow_special") = true)
      .def("decode", &Engine::decode)
      .def("encode_chat", &Engine::encode_chat, py::arg("messages_json"), py::arg("thinking") = false)
      .def("parse_chat", [](const Engine& e, const std::string& text, bool thinking) {
        auto c = e.parse_chat(text, thinking);
        return py::make_tuple(c.reasoning, c.content);
      })
      .def("stats", [](const Engine& e) {
        EngineStats s = e.stats();
        py::dict d;
        d["steps"] = s.steps;
        d["async_steps"] = s.async_steps;
        d["prefill_tokens"] = s.prefill_tokens;
        d["decode_tokens"] = s.decode_tokens;
        d["preemptions"] = s.preemptions;
        d["rejected"] = s.rejected;
        d["max_running"] = s.max_running;
        d["state_bytes_peak"] = s.state_bytes_peak;
        d["host_seconds"] = s.host_seconds;
        d["model_wait_seconds"] = s.model_wait_seconds;
        d["device_busy_seconds"] = s.device_busy_seconds;
        d["device_idle_seconds"] = s.device_idle_seconds;
        d["moe_lb_contiguous"] = s.moe_lb_contiguous;  // EPLB (expert_parallel > 1)
        d["moe_lb_eplb"] = s.moe_lb_eplb;
        d["eplb_window_steps"] = s.eplb_window_steps;
        d["eplb_window_pairs"] = s.eplb_window_pairs;
        d["moe_lb_placed"] = s.moe_lb_placed;  // EPLB rebalancing (eplb_rebalance_steps > 0)
        d["eplb_rebalances"] = s.eplb_rebalances;
        d["eplb_slots_moved"] = s.eplb_slots_moved;
        py::list ranks;  // data_parallel > 1: one dict per rank
        for (const EngineStats::Rank& r : s.ranks) {
          py::dict rd;
          rd["requests"] = r.requests;
          rd["steps"] = r.steps;
          rd["empty_steps"] = r.empty_steps;
          rd["prefill_tokens"] = r.prefill_tokens;
          rd["decode_tokens"] = r.decode_tokens;
          ranks.append(rd);
        }
        d["ranks"] = ranks;
        return d;
      });
}
