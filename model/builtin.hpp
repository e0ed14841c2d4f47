#pragma once
// The built-in presets: model/presets/*.preset, embedded by CMake into the generated presets.cpp.

namespace fusedcoll::model::builtin {

struct Entry {
  const char* name;  // the file's name without ".preset"
  const char* text;  // the whole file
};
extern const Entry kPresets[];
extern const int kPresetCount;

}  // namespace fusedcoll::model::builtin
