#include "config/config_roots.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "config/did_you_mean.h"
#include "core/error.h"

namespace primus::config {
namespace {

namespace fs = std::filesystem;

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

std::string executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

bool has_yaml_suffix(const std::string& name) {
  auto ends_with = [&](std::string_view s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends_with(".yaml") || ends_with(".yml");
}

}  // namespace

std::string project_config_dir(const EnvLookup& env) {
  std::vector<fs::path> candidates;
  if (auto home = env("PRIMUS_HOME"); home && !home->empty())
    candidates.push_back(fs::path(*home) / "configs");
  std::string exe_dir = executable_dir();
  if (!exe_dir.empty()) {
    candidates.push_back(fs::path(exe_dir) / ".." / "configs");
    candidates.push_back(fs::path(exe_dir) / ".." / ".." / "configs");
  }
#ifdef PRIMUS_SOURCE_DIR
  candidates.push_back(fs::path(PRIMUS_SOURCE_DIR) / "configs");
#endif
  for (const fs::path& c : candidates) {
    // A configs/ dir that has our layout; a stray "configs" folder elsewhere must not shadow ours.
    if (is_dir(c / "models") && is_dir(c / "modules")) {
      std::error_code ec;
      fs::path canon = fs::canonical(c, ec);
      return ec ? c.lexically_normal().string() : canon.string();
    }
  }
  return "";
}

std::vector<std::string> config_search_path(const EnvLookup& env) {
  std::vector<std::string> roots;
  auto add = [&](const std::string& dir) {
    if (dir.empty() || !is_dir(dir)) return;
    std::error_code ec;
    fs::path canon = fs::canonical(dir, ec);
    std::string d = ec ? dir : canon.string();
    if (std::find(roots.begin(), roots.end(), d) == roots.end()) roots.push_back(d);
  };
  if (auto path = env("PRIMUS_CONFIG_PATH")) {
    size_t start = 0;
    while (start <= path->size()) {
      size_t colon = path->find(':', start);
      if (colon == std::string::npos) colon = path->size();
      add(path->substr(start, colon - start));
      start = colon + 1;
    }
  }
  add(project_config_dir(env));
  return roots;
}

std::string find_preset(const std::vector<std::string>& roots, const std::string& subdir,
                        const std::string& name, const std::string& what, const Origin& where) {
  if (name.empty()) throw ConfigError(fmt::format("{}: the {} name is empty", where.str(), what));
  // Primus's *.template.yaml experiments leave names as <PLACEHOLDERS> for the user to fill in.
  if (name.size() > 2 && name.front() == '<' && name.back() == '>')
    throw ConfigError(
        fmt::format("{}: the {} name '{}' is a template placeholder", where.str(), what, name),
        fmt::format("replace {} with the name of a {} (this file is a template to copy)", name, what));
  std::string file = has_yaml_suffix(name) ? name : name + ".yaml";
  if (fs::path(file).is_absolute()) {
    if (std::error_code ec; fs::exists(file, ec)) return file;
    throw ConfigError(fmt::format("{}: {} '{}' not found", where.str(), what, file));
  }
  std::vector<std::string> looked;
  std::vector<std::string> nearby;
  for (const std::string& root : roots) {
    fs::path candidate = fs::path(root) / subdir / file;
    if (std::error_code ec; fs::exists(candidate, ec)) return candidate.lexically_normal().string();
    looked.push_back(candidate.lexically_normal().string());
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(fs::path(root) / subdir, ec))
      if (entry.is_regular_file()) nearby.push_back(entry.path().filename().string());
  }
  std::string msg =
      fmt::format("{}: {} '{}' not found{}", where.str(), what, name, did_you_mean_text(file, nearby));
  if (looked.empty()) {
    msg += "; there is no config root (set PRIMUS_CONFIG_PATH or PRIMUS_HOME)";
  } else {
    msg += "; looked in:";
    for (const std::string& l : looked) msg += "\n    " + l;
  }
  throw ConfigError(msg, "config roots are PRIMUS_CONFIG_PATH (colon-separated) then the project's configs/");
}

}  // namespace primus::config
