#include <cstdio>

int main() {
  std::puts("primus");
  return 0;
}
