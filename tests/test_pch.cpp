// The target that builds the tests' shared precompiled header (tests/CMakeLists.txt); it
// runs no test of its own.
int main() {
  return 0;
}
