// kvfuzz._kvfuzz: the harness in-process for Python (docs/python.md). The package's Python
// modules (python/kvfuzz/) build check, replay, shrink and the pytest plugin on these; this
// file only binds, one definition of every step staying in the harness.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "binding_support.h"
#include "check_binding.h"
#include "corpus/fixture_files.h"
#include "corpus/fixture_names.h"
#include "corpus/provenance.h"
#include "crash_shrink.h"
#include "judge/report.h"
#include "kv_format_binding.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/generator.h"
#include "kvfuzz/judge.h"
#include "kvfuzz/orchestrate.h"
#include "kvfuzz/property.h"
#include "kvfuzz/shrink.h"
#include "py_engine.h"
#include "python_types.h"
#include "run/declarations_json.h"

namespace nb = nanobind;

namespace kvfuzz::python {

namespace {

struct Outcome {
  bool passed = true;
  std::optional<std::string> signature;  // "prefix/mismatch"
  std::optional<std::string> kind;       // "mismatch"
  std::string failure;                   // the report's first line
  std::string report;
};

Outcome outcome_of(const PropertyOutcome& o) {
  Outcome out;
  out.passed = o.pass;
  if (o.signature) {
    out.signature = to_string(*o.signature);
    out.kind = std::string(failure_kind_name(o.signature->kind));
  }
  if (!o.pass) out.failure = failure_line(o);
  out.report = o.report;
  return out;
}

struct Shrunk {
  Scenario scenario;
  Outcome outcome;
  int accepted = 0, tried = 0, skipped_seen = 0;
  bool timed_out = false, out_of_candidates = false, canonicalised = false, kept_input = false;
};

// A reference row: its key, the keys it sees, its values [q_head, value_dim] and bounds.
nb::tuple reference_row(const ReferenceRow& row, const Layout& layout) {
  const auto heads = static_cast<size_t>(layout.q_heads);
  const auto dim = static_cast<size_t>(layout.value_dim);
  auto* values = new double[row.values.size()];
  std::copy(row.values.begin(), row.values.end(), values);
  nb::capsule owner(values, [](void* p) noexcept { delete[] static_cast<double*>(p); });
  auto* bound = new double[row.bound.size()];
  std::copy(row.bound.begin(), row.bound.end(), bound);
  nb::capsule bound_owner(bound, [](void* p) noexcept { delete[] static_cast<double*>(p); });
  return nb::make_tuple(row.key.seq, row.key.epoch, row.key.pos, row.key_lo, row.key_hi,
                        nb::ndarray<nb::numpy, double, nb::ndim<2>>(values, {heads, dim}, owner),
                        nb::ndarray<nb::numpy, double, nb::ndim<1>>(bound, {heads}, bound_owner));
}

// Every field of the declarations (run/declarations_json.h), as hello's objects write them:
// dtypes by name, P "none" when not rounded, limits as integers (0: none), an optional
// boolean not declared as None, and "whole_model".
nb::dict declarations_dict(const EngineDeclarations& d) {
  return nb::cast<nb::dict>(
      nb::module_::import_("json").attr("loads")(declarations_json(d).dump()));
}

// Scenario: a fixture's content, loaded, saved and read.
void bind_scenario(nb::module_& m) {
  nb::class_<Scenario>(m, "Scenario", "One complete, deterministic test case (a fixture's content)")
      .def_static("from_json", &parse_fixture, nb::arg("text"), nb::arg("origin") = "<string>")
      .def_static(
          "load", [](const std::string& path) { return load_fixture(path); }, nb::arg("path"))
      .def(
          "save", [](const Scenario& s, const std::string& path) { save_fixture(s, path); },
          nb::arg("path"))
      .def("to_json", &write_fixture)
      .def("copy", [](const Scenario& s) { return s; })
      .def_rw("name", &Scenario::name)
      .def_rw("note", &Scenario::note)
      .def_ro("sequences", &Scenario::sequences)
      .def_prop_ro("ops", [](const Scenario& s) { return s.program.size(); })
      .def_prop_ro("tokens", [](const Scenario& s) { return program_tokens(s); })
      .def_prop_ro("q_heads", [](const Scenario& s) { return s.layout.q_heads; })
      .def_prop_ro("kv_heads", [](const Scenario& s) { return s.layout.kv_heads; })
      .def_prop_ro("head_dim", [](const Scenario& s) { return s.layout.head_dim; })
      .def_prop_ro("value_dim", [](const Scenario& s) { return s.layout.value_dim; })
      .def_prop_ro("dtype",
                   [](const Scenario& s) { return std::string(dtype_name(s.layout.dtype)); })
      .def_prop_ro("is_model", [](const Scenario& s) { return s.model.has_value(); })
      .def_prop_ro("hash", [](const Scenario& s) { return scenario_hash(s); })
      .def_prop_ro(
          "seed", [](const Scenario& s) { return s.provenance.seed; },
          "the case seed it was generated from, when it records one")
      .def_prop_ro(
          "recorded_property",
          [](const Scenario& s) { return std::string(property_name(recorded_property(s))); })
      .def("__eq__", [](const Scenario& a, const Scenario& b) { return a == b; })
      .def("__repr__", [](const Scenario& s) {
        return "<kvfuzz.Scenario " + (s.name.empty() ? std::string("(unnamed)") : s.name) + ": " +
               std::to_string(s.program.size()) + " ops, " + std::to_string(program_tokens(s)) +
               " tokens, " + std::to_string(s.sequences) + " sequences>";
      });
}

// Engine handles: built-in engines by name and Python engines, with their declarations.
void bind_engines(nb::module_& m) {
  nb::class_<EngineHandle>(m, "Engine", "An engine the harness can judge (kvfuzz.engine())")
      .def_prop_ro("name", [](const EngineHandle& e) { return e.info->name; })
      .def_prop_ro("mutant", [](const EngineHandle& e) { return e.info->mutant; })
      .def(
          "declarations",
          [](EngineHandle& e, bool fork) { return declarations_dict(e.declarations(fork)); },
          nb::arg("fork") = true,
          "What it declares (capabilities, bitwise claims, numerics, supports), asked once of "
          "one engine made for the smallest layout, in a forked child unless fork is False (an "
          "engine that crashes or hangs there raises RuntimeError naming how the child ended)")
      .def(
          "unjudgeable",
          [](EngineHandle& e, const Scenario& s) { return unjudgeable(s, e.declarations()); },
          "Why the scenario says nothing about this engine, or None")
      .def("__repr__",
           [](const EngineHandle& e) { return "<kvfuzz.Engine " + e.info->name + ">"; });

  m.def(
      "python_engine",
      [](nb::object factory, std::string name) {
        return EngineHandle{python_engine_info(std::move(factory), std::move(name)), {}};
      },
      nb::arg("factory"), nb::arg("name"));
  m.def(
      "builtin_engine",
      [](const std::string& name) {
        const EngineInfo* info = find_engine(name);
        if (info == nullptr) {
          throw nb::value_error(("unknown engine '" + name + "'" + did_you_mean(name) +
                                 "; expected one of " + engine_names())
                                    .c_str());
        }
        return EngineHandle{std::shared_ptr<const EngineInfo>(info, [](const EngineInfo*) {}), {}};
      },
      nb::arg("name"));
  m.def("builtin_engines", [] {
    std::vector<std::string> names;
    for (const EngineInfo& info : engine_registry()) names.push_back(info.name);
    return names;
  });
}

// The properties, generated cases and the reference rows of a scenario.
void bind_cases(nb::module_& m) {
  m.def("properties", [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const PropertyInfo& p : kProperties) out.emplace_back(p.name, p.claim);
    return out;
  });

  m.def("case_seed", &case_seed, nb::arg("run_seed"), nb::arg("index"));
  m.def(
      "generate",
      [](uint64_t seed, EngineHandle* engine, int max_tokens, int max_head_dim, int max_q_heads,
         int max_sequences, int max_ops) {
        const GeneratorOptions options = generator_options(engine, max_tokens, max_head_dim,
                                                           max_q_heads, max_sequences, max_ops);
        PrngChoiceSource choices(seed);
        Scenario s = generate_scenario(choices, options);
        s.provenance.seed = seed;
        return s;
      },
      nb::arg("seed"), nb::arg("engine").none() = nb::none(), nb::arg("max_tokens") = 0,
      nb::arg("max_head_dim") = 0, nb::arg("max_q_heads") = 0, nb::arg("max_sequences") = 0,
      nb::arg("max_ops") = 0);

  m.def(
      "reference",
      [](const Scenario& s) {
        const Prepared prepared = prepare(s);
        nb::list rows;
        for (const ExpectedSlot& slot : prepared.slots) {
          rows.append(reference_row(prepared.reference.at(slot.key), s.layout));
        }
        return rows;
      },
      nb::arg("scenario"));
  m.def(
      "judge_expect", [](const Scenario& s) { return judge_expect(s, prepare(s)); },
      nb::arg("scenario"));
}

// One property on one engine, a fixture replayed as every door replays it, and explain.
void bind_judge(nb::module_& m) {
  nb::class_<Outcome>(m, "Outcome")
      .def_ro("passed", &Outcome::passed)
      .def_ro("signature", &Outcome::signature)
      .def_ro("kind", &Outcome::kind)
      .def_ro("failure", &Outcome::failure)
      .def_ro("report", &Outcome::report);
  m.def(
      "judge",
      [](const std::string& property, const Scenario& s, EngineHandle& engine) {
        const Property p = property_named(property);
        return outcome_of(interruptible([&] { return judge_property(p, s, *engine.info); }));
      },
      nb::arg("property"), nb::arg("scenario"), nb::arg("engine"));
  // One fixture on one engine, as every door replays it (kvfuzz/orchestrate.h), in a
  // forked child unless fork is false: a status ("pass", "wrong-expect", "skip", "fail",
  // "crash") and its detail (the disagreement, why it is skipped, the failing property's
  // report, or how the child ended).
  m.def(
      "replay_fixture",
      [](const Scenario& s, EngineHandle& engine, bool fork, double timeout) {
        const EngineDeclarations& declared = engine.declarations(fork);
        const Prepared prepared = prepare(s);
        const Isolation isolation{fork, seconds_to_ms(timeout)};
        const FixtureReplay replay =
            forks_for(*engine.info, isolation)
                ? with_forked_children([&] {
                    return replay_fixture(s, prepared, *engine.info, declared, isolation);
                  })
                : interruptible(
                      [&] { return replay_fixture(s, prepared, *engine.info, declared); });
        constexpr const char* kStatus[] = {"pass", "wrong-expect", "skip", "fail", "crash"};
        std::string detail = replay.detail;
        if (replay.status == FixtureReplay::Status::crashed) {
          detail = replay.crash_signature + ": " + detail;
        }
        return std::pair<std::string, std::string>(kStatus[static_cast<int>(replay.status)],
                                                   detail);
      },
      nb::arg("scenario"), nb::arg("engine"), nb::arg("fork") = true, nb::arg("timeout") = 600.0);
  // One engine's part of `kvfuzz explain`, as the command computes it (explain_engine,
  // kvfuzz/orchestrate.h); property None: the one the fixture records it fails, else prefix.
  m.def(
      "explain",
      [](const Scenario& s, EngineHandle& engine, std::optional<std::string> property) {
        const Property p = property ? property_named(*property) : recorded_property(s);
        const EngineDeclarations& declared = engine.declarations();
        if (const auto missing = unjudgeable(s, declared)) {
          return "engine " + engine.info->name + ": skipped: the fixture " + *missing + "\n";
        }
        const Prepared prepared = prepare(s);
        return interruptible(
                   [&] { return explain_engine(s, prepared, *engine.info, declared.numerics, p); })
            .text;
      },
      nb::arg("scenario"), nb::arg("engine"), nb::arg("property").none() = nb::none());
}

// Shrinking a failing scenario under its failure signature.
void bind_shrink(nb::module_& m) {
  nb::class_<Shrunk>(m, "Shrunk")
      .def_ro("scenario", &Shrunk::scenario)
      .def_ro("outcome", &Shrunk::outcome)
      .def_ro("accepted", &Shrunk::accepted)
      .def_ro("tried", &Shrunk::tried)
      .def_ro("skipped_seen", &Shrunk::skipped_seen)
      .def_ro("timed_out", &Shrunk::timed_out)
      .def_ro("out_of_candidates", &Shrunk::out_of_candidates)
      .def_ro("canonicalised", &Shrunk::canonicalised)
      .def_ro("kept_input", &Shrunk::kept_input);
  m.def(
      "shrink",
      [](const Scenario& s, EngineHandle& engine, const std::string& property, double seconds,
         bool fork, double timeout, int max_candidates) -> std::optional<Shrunk> {
        ShrinkOptions options;
        options.property = property_named(property);
        options.time_budget_seconds = seconds;
        options.max_candidates = max_candidates;
        // Each judgement in a forked child: a candidate that crashes or hangs the engine is
        // another failure than the one kept, not the end of this process.
        const Isolation isolation{fork, seconds_to_ms(timeout)};
        options.judge = [&](Property p, const Scenario& candidate) {
          return judge_property(p, candidate, *engine.info, isolation);
        };
        options.declared = engine.declarations(fork);  // asked before, with the GIL
        std::optional<ShrinkResult> r =
            forks_for(*engine.info, isolation)
                ? with_forked_children([&] { return shrink(s, *engine.info, options); })
                : interruptible([&] { return shrink(s, *engine.info, options); });
        if (!r) return std::nullopt;
        return Shrunk{
            r->scenario,  outcome_of(r->outcome), r->accepted,      r->tried,     r->skipped_seen,
            r->timed_out, r->out_of_candidates,   r->canonicalised, r->kept_input};
      },
      nb::arg("scenario"), nb::arg("engine"), nb::arg("property"), nb::arg("seconds"),
      nb::arg("fork") = true, nb::arg("timeout") = 600.0, nb::arg("max_candidates") = 0);
}

// Fixture names and provenance, as every other tool that writes a fixture stamps them.
void bind_fixture_names(nb::module_& m) {
  m.def(
      "stamp_failure",
      [](Scenario& s, const std::string& source, const std::string& engine,
         const std::string& property, const std::string& failure) {
        stamp_failure(s, source, engine, property_named(property), failure);
      },
      nb::arg("scenario"), nb::arg("source"), nb::arg("engine"), nb::arg("property"),
      nb::arg("failure"));
  m.def("check_fixture_stem", &check_fixture_stem, nb::arg("engine"), nb::arg("seed"));
  m.def(
      "failure_fixture_stem",
      [](const std::string& engine, const std::string& property, const std::string& kind,
         const Scenario& s) {
        FailureKind k = FailureKind::mismatch;
        for (FailureKind each : kFailureKinds) {
          if (failure_kind_name(each) == kind) k = each;
        }
        return failure_fixture_stem(engine, property_named(property), k, s);
      },
      nb::arg("engine"), nb::arg("property"), nb::arg("kind"), nb::arg("scenario"));
  m.def(
      "fixtures_below",
      [](const std::string& dir) {
        std::vector<std::string> out;
        for (const auto& p : fixtures_below(dir)) out.push_back(p.string());
        return out;
      },
      nb::arg("dir"));
}

}  // namespace

}  // namespace kvfuzz::python

NB_MODULE(_kvfuzz, m) {
  using namespace kvfuzz;
  using namespace kvfuzz::python;
  m.doc() = "kvfuzz's harness in-process (docs/python.md); use the kvfuzz package, not this";
  m.attr("__version__") = KVFUZZ_VERSION;
  // A Python engine's factory is held by C++ (its EngineInfo) and may hold, through its
  // module, the handle that holds it: a cycle the GC cannot see, freed at exit anyway.
  nb::set_leak_warnings(false);

  nb::exception<FixtureError>(m, "FixtureError", PyExc_ValueError);
  nb::exception<EngineError>(m, "EngineError", PyExc_RuntimeError);
  bind_engine_types(m);
  bind_kv_formats(m);
  bind_check(m);
  bind_crash_shrink(m);

  bind_scenario(m);
  bind_engines(m);
  bind_cases(m);
  bind_judge(m);
  bind_shrink(m);
  bind_fixture_names(m);
}
