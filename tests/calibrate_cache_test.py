#!/usr/bin/python3
"""scripts/calibrate-host-preset's cache decisions on recorded sweeps, without running a
benchmark: cache_figures (the cache the cores share, from passes of the memcpy/node/ws* sweep)
and tables_in_cache (whether the embedding's efficiency comes from dlrm()'s tables in the cache).
ctest calibrate_cache, label model.

usage: tests/calibrate_cache_test.py PATH/scripts/calibrate-host-preset
"""
import importlib.machinery
import importlib.util
import sys

loader = importlib.machinery.SourceFileLoader("calibrate", sys.argv[1])
spec = importlib.util.spec_from_loader("calibrate", loader)
cal = importlib.util.module_from_spec(spec)
loader.exec_module(cal)

SIZES = [16, 32, 48, 64, 80, 96, 112, 128, 192]
failures = []


def check(what, got, want):
    if got != want:
        failures.append(f"{what}: got {got!r}, want {want!r}")


def sweep(rates):
    return list(zip(map(float, SIZES), rates))


# The calibration beside the 2026-11-29 09:49 validation run (docs/results/model-validation/
# calibration.json, "cache_sweep"): a dip to the memory's rate at 48-64 MiB, then 19-20 GB/s
# again up to 96. The first-dip rule read 32 MiB, and the embedding took the 256 MiB table's rate
# (0.363 against ~0.97): every embedding cell 1.3-4.3x over.
NOISY = sweep([20.0, 20.6, 11.1, 10.3, 19.5, 19.2, 17.2, 11.5, 11.3])
mib, gbps, med, warning = cal.cache_figures([NOISY], 26.99 / 2)
check("the noisy sweep's cache_mib", mib in (96, 112), True)
check("the noisy sweep is named not monotone", warning is not None and "48 MiB" in warning, True)
check("the noisy sweep's cache_gbps is its plateau's", 19 <= gbps <= 20.6, True)
check("every rank's tables in its cache", cal.tables_in_cache(mib, med)[0], True)

# A clean, monotone sweep (docs/simulation.md, 2026-11-29, 3 repetitions): the plateau to
# 96 MiB, partly cached at 112-128, the memory's at 192. Its knee: 112 (25.8, 94% of in-cache).
CLEAN = sweep([27.8, 28.1, 27.9, 27.4, 27.6, 27.5, 25.8, 23.1, 16.3])
mib, gbps, med, warning = cal.cache_figures([CLEAN], 16.0)
check("the clean sweep's cache_mib", mib, 112)
check("the clean sweep has no warning", warning, None)
check("the clean sweep's cache_gbps", 27.4 <= gbps <= 28.1, True)
# The same knee one step earlier, where the 112 MiB point is already half-way down.
EARLIER = sweep([27.8, 28.1, 27.9, 27.4, 27.6, 27.5, 21.0, 18.0, 16.3])
check("a knee at 96 MiB", cal.cache_figures([EARLIER], 16.0)[0], 96)

# A flat sweep, no faster than the memory: no cache term (cache_mib 0), and so the embedding
# takes the 256 MiB table's rate (the model prices nothing in a cache either).
FLAT = sweep([12.1, 11.8, 12.3, 11.9, 12.0, 12.2, 11.7, 12.0, 11.9])
mib, gbps, med, warning = cal.cache_figures([FLAT], 12.0)
check("the flat sweep's cache_mib", mib, 0)
check("no cache, no tables in it", cal.tables_in_cache(mib, med)[0], False)

# A cache beyond the sweep (every size at the cache's rate, well above the memory's): its largest
# size, a lower bound, with a warning.
ALL_IN = sweep([28.0] * 9)
mib, gbps, med, warning = cal.cache_figures([ALL_IN], 12.0)
check("a cache beyond the sweep", (mib, warning is not None), (192, True))

# Passes: the per-size median. One pass that dips at 48-96 MiB among three does not move the
# cache; nor does a noisy pass's dip make the clean passes' knee inconsistent.
mib, gbps, med, warning = cal.cache_figures(
    [CLEAN, sweep([27.0, 27.5, 12.0, 11.0, 12.5, 11.8, 11.5, 14.0, 16.0]), CLEAN], 16.0)
check("a slow pass among three", (mib, warning), (112, None))

# The embedding's decision is the model's test (model::in_cache: tables <= cache_mib MiB) on
# the same figure; near the edge (within one step of the sweep) it warns.
tables_mib = cal.ALL_EMB_TABLES / float(1 << 20)
check("dlrm()'s tables are ~47 MiB", 46 < tables_mib < 48, True)
check("tables in a 96 MiB cache", cal.tables_in_cache(96, CLEAN), (True, None))
check("tables beyond a 32 MiB cache", cal.tables_in_cache(32, CLEAN)[0], False)
fits, note = cal.tables_in_cache(48, CLEAN)
check("tables at a 48 MiB cache: in, with a warning", (fits, note is not None), (True, True))
fits, note = cal.tables_in_cache(32, CLEAN)
check("tables one step beyond a 32 MiB cache: out, with a warning", (fits, note is not None),
      (False, True))

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("calibrate-host-preset cache decisions: all checks hold")
