// fusedcoll-mnist: trains Horovod's pytorch_mnist network data-parallel on the fusedcoll emulator
// (1, 2, 4, ... workers), averaging gradients with fusedcoll's AllReduce. See docs/mnist.md.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "mnist/idx.hpp"
#include "mnist/model.hpp"
#include "mnist/trainer.hpp"
#ifdef FUSEDCOLL_MNIST_HAVE_MPI
#include "fusedcoll/mpi.hpp"
#endif
#include "fusedcoll/detail/cli.hpp"
#include "fusedcoll/env.hpp"
#include "fusedcoll/error.hpp"

namespace fc = fusedcoll;
namespace mn = fusedcoll::mnist;

namespace {

constexpr const char* kUsage = R"(usage: fusedcoll-mnist [options]

Trains the Horovod pytorch_mnist network (2 conv + 2 fc layers, 21,840 parameters) with SGD,
data-parallel over emulated workers that average gradients with fusedcoll's AllReduce.

  --data-dir DIR          IDX files (train-*/t10k-*, raw or .gz) [data/mnist, from scripts/get-mnist]
  --workers P             data-parallel workers, >= 1 [1]
  --epochs N              [10]
  --batch-size B          per worker [64]
  --hidden H              width of the fc layer, 320->H->10, in [1, 65536]: 5,290 + 331 x H
                          parameters (the gradient each step exchanges) [50, the lab's]
  --lr X                  learning rate per worker; the step uses X * workers [0.01]
  --momentum M            SGD momentum [0.5]
  --seed S                initial weights, shuffles and dropout masks [42]
  --test-batch-size B     [1000]
  --compress C            gradient wire format: none | fp16 | bf16 | fp8-e4m3 | fp8-e5m2 [none]
  --error-feedback        with --compress: add what the wire lost of each step's gradient to
                          the next one (per worker)
  --algo A                AllReduce algorithm: direct | ring | chain [direct]
  --backend B             emu (workers are threads of this process) | mpi (run under
                          mpiexec -n P: one worker per process, --workers ignored) [emu]
  --no-progress           no progress bar, only the per-epoch lines
  --report                run the grid (serial, 2 and 4 workers) and write a Markdown table and a
                          plot of accuracy per epoch into --report-dir
  --report-dir DIR        [docs/results/mnist]
  --csv-file FILE         append the run's figures to FILE as one CSV row (a header line when
                          FILE is new or empty; rank 0 writes it); not with --report
  --label TEXT            the row's first column (e.g. the link a cluster was shaped to)
  --help
)";

namespace cli = fc::detail::cli;

// Sizes up to 2^20: any realistic worker count or batch, and products of two stay in int64.
int parse_positive_int(const std::string& flag, const std::string& v) {
  return cli::parse_int(flag, v, 1, 1 << 20);
}

// Range checks of the rates are the trainer's (Options are validated there for every caller).
double parse_double(const std::string& flag, const std::string& v) {
  return cli::parse_number(flag, v, std::numeric_limits<double>::lowest(),
                           std::numeric_limits<double>::max());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

constexpr const char* kCsvHeader =
    "label,backend,workers,compress,error_feedback,algo,hidden,batch_size,epochs,lr,seed,"
    "parameters,bytes_per_step,train_s,epoch_s_median,compute_s_median,exchange_s_median,"
    "samples_per_s_median,final_accuracy,best_accuracy";

/// Appends one row of `r` to the --csv-file `path` (the header first when the file is new or
/// empty; a file with other columns is an error, as fusedcoll-perf's --csv-file).
void append_csv(const std::string& path, const std::string& label, const std::string& backend,
                int workers, const mn::TrainOptions& o, const mn::TrainResult& r) {
  std::string first;
  {
    std::ifstream in(path);
    std::getline(in, first);
  }
  FC_ENFORCE(first.empty() || first == kCsvHeader, "--csv-file ", path, " holds other columns (",
             first, "); use another file");
  std::FILE* f = std::fopen(path.c_str(), "a");
  FC_ENFORCE(f != nullptr, "cannot append to --csv-file ", path);
  std::vector<double> epoch, compute, exchange, rate;
  double best = 0;
  for (const auto& e : r.epochs) {
    epoch.push_back(e.train_seconds);
    compute.push_back(e.compute_seconds);
    exchange.push_back(e.exchange_seconds);
    rate.push_back(e.samples_per_second);
    best = std::max(best, e.test_accuracy);
  }
  if (first.empty()) std::fprintf(f, "%s\n", kCsvHeader);
  std::fprintf(f,
               "%s,%s,%d,%s,%d,%s,%d,%d,%zu,%g,%llu,%lld,%lld,%.3f,%.4f,%.4f,%.4f,%.1f,%.4f,%.4f\n",
               label.c_str(), backend.c_str(), workers, mn::to_string(o.exchange.compression),
               o.exchange.error_feedback ? 1 : 0, fc::to_string(o.exchange.algo), o.hidden,
               o.batch_size, r.epochs.size(), o.lr, static_cast<unsigned long long>(o.seed),
               static_cast<long long>(r.parameters), static_cast<long long>(r.bytes_per_step),
               r.train_seconds, median(epoch), median(compute), median(exchange), median(rate),
               r.epochs.empty() ? 0.0 : r.epochs.back().test_accuracy, best);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  FC_ENFORCE(!failed, "writing --csv-file ", path, " failed");
}

std::string quote_command(int argc, char** argv) {
  std::string s = "fusedcoll-mnist";
  for (int i = 1; i < argc; ++i) s += fc::detail::make_string(" ", argv[i]);
  return s;
}

int run(int argc, char** argv) {
  fc::enforce_env();
  mn::TrainOptions options;
  options.redraw_progress = isatty(STDERR_FILENO) == 1;
  std::string data_dir = "data/mnist";
  std::string report_dir = "docs/results/mnist";
  bool report = false;
  std::string backend = "emu";
  std::string csv_file, label;
  const std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    const auto value = [&]() -> const std::string& {
      FC_ENFORCE(i + 1 < args.size(), flag, " needs a value (see --help)");
      return args[++i];
    };
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (flag == "--data-dir") {
      data_dir = value();
    } else if (flag == "--workers") {
      options.workers = parse_positive_int(flag, value());
    } else if (flag == "--epochs") {
      options.epochs = parse_positive_int(flag, value());
    } else if (flag == "--batch-size") {
      options.batch_size = parse_positive_int(flag, value());
    } else if (flag == "--hidden") {
      options.hidden = cli::parse_int(flag, value(), 1, mn::Net<float>::kMaxHidden);
    } else if (flag == "--test-batch-size") {
      options.test_batch_size = parse_positive_int(flag, value());
    } else if (flag == "--lr") {
      options.lr = parse_double(flag, value());
    } else if (flag == "--momentum") {
      options.momentum = parse_double(flag, value());
    } else if (flag == "--seed") {
      options.seed = static_cast<std::uint64_t>(
          cli::parse_integer(flag, value(), 0, std::numeric_limits<long long>::max()));
    } else if (flag == "--compress") {
      options.exchange.compression = mn::parse_compression(value());
    } else if (flag == "--error-feedback") {
      options.exchange.error_feedback = true;
    } else if (flag == "--algo") {
      const std::string& a = value();
      if (a == "direct") options.exchange.algo = fc::AllReduceAlgo::direct;
      else if (a == "ring") options.exchange.algo = fc::AllReduceAlgo::ring;
      else if (a == "chain") options.exchange.algo = fc::AllReduceAlgo::chain;
      else throw fc::InvalidArgument("--algo '" + a + "' is not one of direct, ring, chain");
    } else if (flag == "--no-progress") {
      options.progress = false;
    } else if (flag == "--backend") {
      backend = value();
      FC_ENFORCE(backend == "emu" || backend == "mpi", "--backend '", backend,
                 "' is not one of emu, mpi");
    } else if (flag == "--report") {
      report = true;
    } else if (flag == "--report-dir") {
      report_dir = value();
    } else if (flag == "--csv-file") {
      csv_file = value();
      FC_ENFORCE(!csv_file.empty(), "--csv-file needs a file name");
    } else if (flag == "--label") {
      label = value();
      FC_ENFORCE(label.find_first_of(",\"\n\r") == std::string::npos, "--label '", label,
                 "' holds a comma, quote or line break (a CSV field)");
    } else {
      throw fc::InvalidArgument(
          fc::detail::make_string("unknown option '", flag, "' (see --help)"));
    }
  }
  FC_ENFORCE(csv_file.empty() || !report,
             "--csv-file records one run; --report writes its grid into --report-dir");
  FC_ENFORCE(label.empty() || !csv_file.empty(), "--label names the row of --csv-file");
  // Fail on an unavailable codec before loading data or training for minutes.
  mn::check_exchange(options.exchange);

  const mn::Dataset train = mn::load_mnist(data_dir, "train");
  const mn::Dataset test = mn::load_mnist(data_dir, "t10k");
  std::cerr << "data: " << train.size() << " training and " << test.size() << " test images from "
            << data_dir << "\n";
  if (backend == "mpi") {
    FC_ENFORCE(!report, "--report runs its grid on the emulator; drop --backend mpi");
#ifdef FUSEDCOLL_MNIST_HAVE_MPI
    // One worker per MPI process: the job's size is the worker count. fusedcoll::mpi::run ends
    // the whole job with the failing rank's message if any rank throws.
    return fc::mpi::run(argc, argv, [&](fc::Communicator& comm) {
      const auto t0 = std::chrono::steady_clock::now();
      const mn::TrainResult r =
          mn::train_rank(comm, train, test, options, comm.rank() == 0 ? &std::cerr : nullptr);
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (comm.rank() == 0)
        std::cout << "workers " << comm.size() << " (MPI processes)  parameters " << r.parameters
                  << "  batch " << options.batch_size << "  epochs " << r.epochs.size()
                  << "  test accuracy " << 100 * r.epochs.back().test_accuracy
                  << "%  training time " << r.train_seconds << " s  wall time " << wall
                  << " s (with evaluation)  gradient bytes sent per step (rank 0) "
                  << r.bytes_per_step << "\n";
      if (comm.rank() == 0 && !csv_file.empty())
        append_csv(csv_file, label, backend, comm.size(), options, r);
    });
#else
    throw fc::UnsupportedError("--backend mpi: this build has no MPI backend (FUSEDCOLL_ENABLE_MPI)");
#endif
  }
  if (report) {
    mn::write_report(train, test, options, mn::report_grid(), report_dir, quote_command(argc, argv),
                     std::cerr);
    return 0;
  }
  std::cerr << "training on " << options.workers << " worker(s), batch " << options.batch_size
            << " per worker, lr " << options.lr * options.workers << ", compress "
            << mn::to_string(options.exchange.compression) << ", AllReduce "
            << fc::to_string(options.exchange.algo) << "\n";
  const auto t0 = std::chrono::steady_clock::now();
  const mn::TrainResult r = mn::train(train, test, options, &std::cerr);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "workers " << options.workers << "  parameters " << r.parameters << "  batch "
            << options.batch_size << "  epochs " << r.epochs.size() << "  test accuracy "
            << 100 * r.epochs.back().test_accuracy << "%  training time " << r.train_seconds
            << " s  wall time " << wall
            << " s (with evaluation)  gradient bytes sent per step (rank 0) " << r.bytes_per_step
            << "\n";
  if (!csv_file.empty()) append_csv(csv_file, label, backend, options.workers, options, r);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const fc::Error& e) {
    std::cerr << "fusedcoll-mnist: error (" << fc::to_string(e.code()) << "): " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "fusedcoll-mnist: error: " << e.what() << "\n";
  }
  return EXIT_FAILURE;
}
