// The registry of users' kernels' GPU instantiations (gpu/kernel_registry.hpp), on the CPU: a
// kernel is found by its typeid name, a second registration keeps the first, and an unregistered
// kernel is an UnsupportedError that names it (demangled) and says how to register it. The GPU's
// entries are opaque here; tests/gpu/gpu_kernels_test.cpp launches real ones.

#include <gtest/gtest.h>

#include <string>
#include <typeinfo>

#include "fusedcoll/error.hpp"
#include "gpu/kernel_registry.hpp"

namespace {

namespace fc = fusedcoll;

namespace user {
struct Registered {};
struct Twice {};
template <class T, int N>
struct Templated {};
struct Missing {};
}  // namespace user

const int kFirst = 1, kSecond = 2;

// As FUSEDCOLL_GPU_KERNEL does, at static initialisation.
const bool kRegistered =
    fc::gpu::register_kernel(typeid(user::Registered).name(), "registered", &kFirst);

TEST(GpuKernelRegistry, FindsWhatStaticInitialisationRegistered) {
  EXPECT_TRUE(kRegistered);
  EXPECT_EQ(fc::gpu::find_kernel(typeid(user::Registered).name()), &kFirst);
  EXPECT_EQ(fc::gpu::find_kernel(typeid(user::Missing).name()), nullptr);
}

TEST(GpuKernelRegistry, ASecondRegistrationKeepsTheFirst) {
  const char* type = typeid(user::Twice).name();
  EXPECT_TRUE(fc::gpu::register_kernel(type, "twice", &kFirst));
  EXPECT_TRUE(fc::gpu::register_kernel(type, "twice", &kSecond));
  EXPECT_EQ(fc::gpu::find_kernel(type), &kFirst);
}

TEST(GpuKernelRegistry, TemplatesAreTheirOwnKernels) {
  const char* a = typeid(user::Templated<float, 1>).name();
  const char* b = typeid(user::Templated<float, 2>).name();
  EXPECT_TRUE(fc::gpu::register_kernel(a, "t1", &kFirst));
  EXPECT_TRUE(fc::gpu::register_kernel(b, "t2", &kSecond));
  EXPECT_EQ(fc::gpu::find_kernel(a), &kFirst);
  EXPECT_EQ(fc::gpu::find_kernel(b), &kSecond);
  EXPECT_EQ(fc::gpu::readable_type(a), "(anonymous namespace)::user::Templated<float, 1>");
}

TEST(GpuKernelRegistry, AnUnregisteredKernelNamesItselfAndHowToRegister) {
  for (const char* name : {"missing", ""}) {
    try {
      fc::gpu::throw_unregistered(name, typeid(user::Missing).name());
      FAIL() << "no exception";
    } catch (const fc::UnsupportedError& e) {
      const std::string w = e.what();
      if (*name != '\0') {
        EXPECT_NE(w.find("kernel 'missing'"), std::string::npos) << w;
      }
      EXPECT_NE(w.find("(anonymous namespace)::user::Missing"), std::string::npos) << w;
      EXPECT_NE(w.find("fusedcoll_add_kernel("), std::string::npos) << w;
      EXPECT_NE(w.find("FUSEDCOLL_GPU_KERNEL((anonymous namespace)::user::Missing);"),
                std::string::npos)
          << w;
    }
  }
}

}  // namespace
