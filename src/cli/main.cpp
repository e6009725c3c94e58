#include "cli/app.h"

int main(int argc, char** argv) {
  return primus::cli::run(argc, argv);
}
