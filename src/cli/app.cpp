#include "cli/app.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli_context.h"
#include "config/did_you_mean.h"
#include "core/error.h"
#include "core/log.h"

namespace primus::cli {
namespace {

void print_error(const std::string& message, const std::string& hint) {
  std::fprintf(stderr, "primus: error: %s\n", message.c_str());
  if (!hint.empty()) std::fprintf(stderr, "  hint: %s\n", hint.c_str());
}

// The long option names of one level ("--help", "--version", ...).
std::vector<std::string> option_names(CLI::App* level) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : level->get_options())
    for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
  return names;
}

// CLI11 reports an unknown subcommand only as "a subcommand is required", and an unknown option without a
// suggestion; check the levels above the leaf command first so that the message can name the mistake and
// suggest the right word. (The leaf command's unknown options are configuration overrides.)
void check_subcommand_names(CLI::App& root, int argc, char** argv) {
  CLI::App* level = &root;
  for (int i = 1; i < argc; ++i) {
    std::string token = argv[i];
    std::vector<CLI::App*> subs = level->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return;
    const std::string where = level == &root ? "primus" : "primus " + level->get_name();
    if (token.rfind("-", 0) == 0) {  // options above the leaf take no values
      std::string name = token.substr(0, token.find('='));
      std::vector<std::string> known = option_names(level);
      if (name.rfind("--", 0) == 0 && std::find(known.begin(), known.end(), name) == known.end())
        throw ConfigError(
            fmt::format("unknown option '{}' for {}{}", name, where, config::did_you_mean_text(name, known)),
            fmt::format("run `{} --help`", where));
      continue;
    }
    std::vector<std::string> names;
    CLI::App* next = nullptr;
    for (CLI::App* s : subs) {
      names.push_back(s->get_name());
      if (s->get_name() == token) next = s;
    }
    if (next == nullptr) {
      throw ConfigError(
          fmt::format("unknown command '{}' for {}{}", token, where, config::did_you_mean_text(token, names)),
          fmt::format("commands: {}; run `primus --help`", fmt::join(names, ", ")));
    }
    level = next;
  }
}

}  // namespace

int run(int argc, char** argv) {
  CliContext ctx;
  CLI::App app{"Primus-C++: LLM pretraining on NVIDIA Hopper (a C++/CUDA reimplementation of AMD's Primus)"};
  app.name("primus");
  app.set_version_flag("--version", std::string("primus ") + PRIMUS_VERSION, "Print the version and exit");
  app.add_flag("--debug", ctx.debug, "Log at debug level");
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 ok, 1 runtime failure, 2 bad configuration or arguments, 3 pre-flight failure,\n"
      "4 halted by a training guard (non-finite loss or gradient), 5 hang watchdog.\n"
      "Run `primus <command> --help` for a command's options.");
  for (const CommandRegistration& c : commands()) c.attach(app, ctx);

  // `launch` runs the words after its `--` as they are (CliContext::passthrough).
  std::vector<char*> args(argv, argv + argc);
  const auto command = std::find_if(args.begin() + 1, args.end(), [](const char* a) { return a[0] != '-'; });
  if (command != args.end() && std::string(*command) == "launch") {
    const auto dashes =
        std::find_if(command + 1, args.end(), [](const char* a) { return std::string(a) == "--"; });
    if (dashes != args.end()) {
      for (auto it = dashes + 1; it != args.end(); ++it) ctx.passthrough.emplace_back(*it);
      args.erase(dashes, args.end());
    }
  }
  try {
    check_subcommand_names(app, static_cast<int>(args.size()), args.data());
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    print_error(e.what(), "run with --help for the options");
    return 2;
  } catch (const Error& e) {
    print_error(e.what(), e.hint());
    return e.exit_code();
  }

  if (ctx.debug) log::set_level(log::Level::kDebug);
  if (!ctx.action) {
    print_error("nothing to do", "run `primus --help`");
    return 2;
  }
  try {
    return ctx.action();
  } catch (const Error& e) {
    print_error(e.what(), e.hint());
    return e.exit_code();
  } catch (const std::exception& e) {
    print_error(e.what(), "");
    return 1;
  }
}

}  // namespace primus::cli
