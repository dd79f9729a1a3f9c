// The test binary's main: GoogleTest's, except that a run in which no test passed, none failed and
// some skipped (a suite that needs a GPU, on a machine without one) exits 77, which CTest reports
// as a skip (CMakeLists.txt: SKIP_RETURN_CODE 77 on each suite's test, cmake/gtest_suites.cmake).
// GoogleTest's own main exits 0 there, and a whole suite skipped would read as passed.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  if (rc == 0 && u.successful_test_count() == 0 && u.failed_test_count() == 0 && u.skipped_test_count() > 0) {
    return 77;
  }
  return rc;
}
