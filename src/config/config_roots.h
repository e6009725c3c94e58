#pragma once
// Where presets are found. As in Primus, `config: X` names modules/<framework>/X and `model: Y` names
// models/<framework>/Y under a config root. The roots, searched in order (the first root holding the file
// wins):
//   1. every directory in PRIMUS_CONFIG_PATH (colon-separated, left to right), e.g. a Primus checkout's
//      primus/configs, so that a user's or Primus's own presets take precedence over ours;
//   2. the project's configs/ directory: $PRIMUS_HOME/configs, else ../configs or ../../configs next to the
//      executable, else the source tree's configs/ (PRIMUS_SOURCE_DIR at build time).
#include <string>
#include <vector>

#include "config/env_subst.h"
#include "config/value.h"

namespace primus::config {

// The project's own configs/ directory ("" when none of the candidates exists).
std::string project_config_dir(const EnvLookup& env);

// The search path described above, existing directories only, without duplicates.
std::vector<std::string> config_search_path(const EnvLookup& env);

// Finds `<root>/<subdir>/<name>` (".yaml" appended when `name` has no .yaml/.yml suffix; an absolute `name`
// is used as is). `what` ("module preset", "model preset", "platform preset") and `where` (the line that
// named it) go into the error, which lists every place looked at and suggests near names.
std::string find_preset(const std::vector<std::string>& roots, const std::string& subdir,
                        const std::string& name, const std::string& what, const Origin& where);

}  // namespace primus::config
