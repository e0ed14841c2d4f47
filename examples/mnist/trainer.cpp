#include "mnist/trainer.hpp"

#include "fusedcoll/compression.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <numeric>
#include <ostream>
#include <thread>

#include "mnist/model.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/error.hpp"

namespace fusedcoll::mnist {
namespace {

using detail::make_string;
using Clock = std::chrono::steady_clock;

// The normalisation of the PyTorch and Horovod MNIST examples (transforms.Normalize).
constexpr float kPixelMean = 0.1307f;
constexpr float kPixelStd = 0.3081f;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Columns = images `idx[0..count)` of `set`, normalised.
Mat<float> gather_images(const Dataset& set, const std::int64_t* idx, std::int64_t count,
                         std::vector<int>& labels) {
  const std::int64_t pixels = set.image_bytes();
  Mat<float> x(pixels, count);
  labels.resize(static_cast<std::size_t>(count));
  for (std::int64_t j = 0; j < count; ++j) {
    const std::uint8_t* src = set.pixels.data() + idx[j] * pixels;
    float* dst = x.data() + j * pixels;
    for (std::int64_t p = 0; p < pixels; ++p) dst[p] = (src[p] / 255.0f - kPixelMean) / kPixelStd;
    labels[static_cast<std::size_t>(j)] = set.labels[static_cast<std::size_t>(idx[j])];
  }
  return x;
}

void all_reduce_in_place(Communicator& comm, float* data, std::int64_t count, ReduceOp op) {
  all_reduce(comm, {.send = data, .recv = data, .count = count, .dtype = DType::f32, .op = op});
}

struct Eval {
  double loss = 0;
  double accuracy = 0;
};

/// Test loss and accuracy: each rank scores its contiguous chunk, then one AllReduce of the sums.
Eval evaluate(Communicator& comm, Net<float>& net, const std::vector<float>& params,
              const Dataset& test, int batch) {
  const Chunk mine = chunk_of(test.size(), comm.size(), comm.rank());
  std::vector<std::int64_t> idx(static_cast<std::size_t>(mine.length));
  std::iota(idx.begin(), idx.end(), mine.offset);
  double loss_sum = 0;
  std::int64_t correct = 0;
  std::vector<int> labels;
  for (std::int64_t at = 0; at < mine.length; at += batch) {
    const std::int64_t count = std::min<std::int64_t>(batch, mine.length - at);
    const Mat<float> x = gather_images(test, idx.data() + at, count, labels);
    const Mat<float> logp = net.forward(x, params.data(), nullptr);
    for (std::int64_t j = 0; j < count; ++j) {
      Eigen::Index best = 0;
      logp.col(j).maxCoeff(&best);
      correct += best == labels[static_cast<std::size_t>(j)];
      loss_sum -= logp(labels[static_cast<std::size_t>(j)], j);
    }
  }
  // f32 holds the correct count exactly below 2^24 samples.
  float sums[2] = {static_cast<float>(loss_sum), static_cast<float>(correct)};
  all_reduce_in_place(comm, sums, 2, ReduceOp::sum);
  return {sums[0] / static_cast<double>(test.size()), sums[1] / static_cast<double>(test.size())};
}

class ProgressBar {
 public:
  ProgressBar(std::ostream* out, bool redraw, int epoch, int epochs, std::int64_t total)
      : out_(out),
        redraw_(redraw),
        epoch_(epoch),
        epochs_(epochs),
        total_(total),
        t0_(Clock::now()) {}

  void update(std::int64_t done, double loss, bool last) {
    if (out_ == nullptr || (!redraw_ && !last)) return;
    const double t = seconds_since(t0_);
    if (!last && t - shown_ < 0.2) return;
    shown_ = t;
    constexpr int kWidth = 30;
    const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
    *out_ << (redraw_ ? "\r" : "") << "epoch " << epoch_ << "/" << epochs_ << " ["
          << std::string(static_cast<std::size_t>(filled), '#')
          << std::string(static_cast<std::size_t>(kWidth - filled), '.') << "] " << done << "/"
          << total_ << "  " << std::fixed << std::setprecision(0) << (t > 0 ? done / t : 0.0)
          << " samples/s  loss " << std::setprecision(4) << loss << std::defaultfloat
          << (last ? "\n" : "") << std::flush;
  }

 private:
  std::ostream* out_;
  bool redraw_;
  int epoch_;
  int epochs_;
  std::int64_t total_;
  Clock::time_point t0_;
  double shown_ = -1;
};

}  // namespace

std::vector<std::int64_t> epoch_shard(std::int64_t n, int rank, int world, std::uint64_t seed,
                                      int epoch) {
  FC_ENFORCE(n >= 1 && world >= 1 && rank >= 0 && rank < world, "epoch_shard: n ", n, ", rank ",
             rank, ", world ", world);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), std::int64_t{0});
  Rng rng(seed ^ (0xa0761d6478bd642fULL * static_cast<std::uint64_t>(epoch + 1)));
  for (std::int64_t i = n - 1; i > 0; --i)
    std::swap(perm[static_cast<std::size_t>(i)],
              perm[rng.below(static_cast<std::uint64_t>(i + 1))]);
  const std::int64_t per_rank = (n + world - 1) / world;
  std::vector<std::int64_t> shard(static_cast<std::size_t>(per_rank));
  for (std::int64_t i = 0; i < per_rank; ++i)
    shard[static_cast<std::size_t>(i)] = perm[static_cast<std::size_t>((i * world + rank) % n)];
  return shard;
}

const char* to_string(GradCompression c) noexcept {
  switch (c) {
    case GradCompression::none:
      return "none";
    case GradCompression::fp16:
      return "fp16";
    case GradCompression::bf16:
      return "bf16";
    case GradCompression::fp8_e4m3:
      return "fp8-e4m3";
    case GradCompression::fp8_e5m2:
      return "fp8-e5m2";
  }
  return "invalid";
}

GradCompression parse_compression(const std::string& name) {
  for (const auto c : {GradCompression::none, GradCompression::fp16, GradCompression::bf16,
                       GradCompression::fp8_e4m3, GradCompression::fp8_e5m2})
    if (name == to_string(c)) return c;
  throw InvalidArgument(
      make_string("--compress '", name, "' is not one of none, fp16, bf16, fp8-e4m3, fp8-e5m2"));
}

namespace {

CompressionOptions wire_of(const ExchangeOptions& options) {
  CompressionOptions wire;
  switch (options.compression) {
    case GradCompression::none: wire.format = WireFormat::none; break;
    case GradCompression::fp16: wire.format = WireFormat::f16; break;
    case GradCompression::bf16: wire.format = WireFormat::bf16; break;
    case GradCompression::fp8_e4m3: wire.format = WireFormat::fp8_e4m3; break;
    case GradCompression::fp8_e5m2: wire.format = WireFormat::fp8_e5m2; break;
  }
  // FP8 gets its per-tensor scale from the amax every rank agrees on (Scaling::automatic), and
  // each contribution is divided by P before the sum so partial sums stay within that scale.
  wire.predivide = true;
  return wire;
}

}  // namespace

void check_exchange(const ExchangeOptions& options) {
  check(wire_of(options));
  FC_ENFORCE(!options.error_feedback || options.compression != GradCompression::none,
             "--error-feedback needs a compressed --compress format (nothing is lost in f32)");
}

namespace {

/// What the compressed AllReduce delivers of this rank's contribution `sent`, in gradient units:
/// it divides by P (predivide), encodes with the scale every rank agrees on (the max of the
/// ranks' amax, headroom P for the sum: docs/compression.md) and decodes. The amax agreement is
/// repeated here with one single-float max-AllReduce, so the scale is the collective's own.
std::vector<float> delivered(Communicator& comm, std::span<const float> sent,
                             const CompressionOptions& wire) {
  const int P = comm.size();
  const auto n = static_cast<std::int64_t>(sent.size());
  std::vector<float> y(sent.size());
  float amax = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    y[i] = sent[i] / static_cast<float>(P);
    amax = std::max(amax, std::fabs(y[i]));
  }
  all_reduce(comm, {.send = &amax, .recv = &amax, .count = 1, .op = ReduceOp::max});
  std::vector<std::byte> enc(y.size() * wire_size(wire.format));
  std::vector<float> q(y.size());
  if (resolved_scaling(wire) == Scaling::per_tensor) {
    const float s = scale_for(wire.format, amax, static_cast<float>(P), wire.pow2_scale);
    encode_scaled(wire.format, y.data(), enc.data(), n, s, wire.overflow);
    decode_scaled(wire.format, enc.data(), q.data(), n, s);
  } else {
    encode(wire.format, y.data(), enc.data(), n, wire.overflow);
    decode(wire.format, enc.data(), q.data(), n);
  }
  for (float& v : q) v *= static_cast<float>(P);
  return q;
}

}  // namespace

void exchange_gradients(Communicator& comm, std::span<float> grads, const ExchangeOptions& options,
                        ErrorFeedback* feedback) {
  const CompressionOptions wire = wire_of(options);
  std::vector<float> sent, received;
  if (options.error_feedback) {
    FC_ENFORCE(feedback != nullptr, "error feedback needs the rank's ErrorFeedback state");
    check_exchange(options);
    feedback->apply(grads);
    sent.assign(grads.begin(), grads.end());
    received = delivered(comm, sent, wire);
  }
  all_reduce(comm, {.send = grads.data(),
                    .recv = grads.data(),
                    .count = static_cast<std::int64_t>(grads.size()),
                    .dtype = DType::f32,
                    .op = ReduceOp::avg,
                    .algo = options.algo,
                    .wire = wire});
  if (options.error_feedback) feedback->update(sent, received);
}

std::int64_t exchange_bytes_per_step(std::int64_t count, int world_size,
                                     const ExchangeOptions& options) {
  FC_ENFORCE_GE(world_size, 1, "world size");
  if (world_size == 1) return 0;
  std::int64_t element_bytes = 4;
  switch (options.compression) {
    case GradCompression::none:
      element_bytes = 4;
      break;
    case GradCompression::fp16:
    case GradCompression::bf16:
      element_bytes = 2;
      break;
    case GradCompression::fp8_e4m3:
    case GradCompression::fp8_e5m2:
      element_bytes = 1;
      break;
  }
  // Chain: every element's running value leaves rank 0 once, to rank 1 (encoded when compressed);
  // the finished result comes back from the last rank.
  if (options.algo == AllReduceAlgo::chain) return count * element_bytes;
  const std::int64_t own = chunk_of(count, world_size, 0).length;
  // Reduce-scatter: rank 0 sends every chunk but its own (direct: straight to the owner; ring:
  // passed on). All-gather: direct sends its own chunk to P-1 peers; ring forwards every chunk but
  // the one owned by its successor, which stops with it.
  const std::int64_t gather = options.algo == AllReduceAlgo::direct
                                  ? own * (world_size - 1)
                                  : count - chunk_of(count, world_size, 1).length;
  return (count - own + gather) * element_bytes;
}

TrainResult train_rank(Communicator& comm, const Dataset& train, const Dataset& test,
                       const TrainOptions& options, std::ostream* log) {
  FC_ENFORCE_GE(options.epochs, 1, "--epochs");
  FC_ENFORCE_GE(options.batch_size, 1, "--batch-size");
  FC_ENFORCE_GE(options.test_batch_size, 1, "--test-batch-size");
  FC_ENFORCE(options.lr > 0 && std::isfinite(options.lr), "--lr must be positive, got ",
             options.lr);
  FC_ENFORCE(options.momentum >= 0 && options.momentum < 1, "--momentum must be in [0, 1), got ",
             options.momentum);
  FC_ENFORCE_GE(train.size(), std::int64_t{comm.size()},
                "training set smaller than the worker count");
  FC_ENFORCE_GE(test.size(), std::int64_t{1}, "empty test set");
  check_exchange(options.exchange);
  const int rank = comm.rank();
  const int world = comm.size();
  if (rank != 0) log = nullptr;

  Net<float> net(0.5, options.hidden);
  const auto n_params = net.parameters();
  std::vector<float> params(static_cast<std::size_t>(n_params), 0.0f);
  if (rank == 0) params = net.initial_parameters(options.seed);
  broadcast(comm, {.send = params.data(),
                   .recv = params.data(),
                   .count = n_params,
                   .dtype = DType::f32,
                   .root = 0});

  std::vector<float> grads(params.size());
  ErrorFeedback feedback;  // used with --error-feedback: what the wire lost, added to the next step
  std::vector<float> velocity(params.size(), 0.0f);
  // Distinct dropout masks per rank, reproducible from the seed.
  Rng dropout_rng(options.seed * 0x9e3779b97f4a7c15ULL +
                  0x632be59bd9b4e019ULL * static_cast<std::uint64_t>(rank + 1));
  const float lr = static_cast<float>(options.lr * world);
  const auto momentum = static_cast<float>(options.momentum);

  TrainResult result;
  result.parameters = n_params;
  result.bytes_per_step = exchange_bytes_per_step(n_params, world, options.exchange);
  const std::int64_t shard_len = (train.size() + world - 1) / world;
  result.steps_per_epoch = (shard_len + options.batch_size - 1) / options.batch_size;

  std::vector<int> labels;
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    const auto shard = epoch_shard(train.size(), rank, world, options.seed, epoch);
    ProgressBar bar(options.progress ? log : nullptr, options.redraw_progress, epoch + 1,
                    options.epochs, shard_len * world);
    const auto t0 = Clock::now();
    double loss_sum = 0;
    double compute_seconds = 0;
    double exchange_seconds = 0;
    for (std::int64_t step = 0; step < result.steps_per_epoch; ++step) {
      const std::int64_t begin = step * options.batch_size;
      const std::int64_t count = std::min<std::int64_t>(options.batch_size, shard_len - begin);
      const Mat<float> x = gather_images(train, shard.data() + begin, count, labels);
      std::fill(grads.begin(), grads.end(), 0.0f);
      const auto t_compute = Clock::now();
      const float loss = net.loss_and_gradient(x, labels, params.data(), grads.data(), dropout_rng);
      compute_seconds += seconds_since(t_compute);
      FC_ENFORCE(std::isfinite(loss), "training diverged: loss ", loss, " at epoch ", epoch + 1,
                 " step ", step, " (try a smaller --lr)");
      loss_sum += loss;
      const auto t_exchange = Clock::now();
      exchange_gradients(comm, grads, options.exchange, &feedback);
      exchange_seconds += seconds_since(t_exchange);
      // PyTorch's SGD with momentum: v = m v + g; p -= lr v.
      for (std::size_t i = 0; i < params.size(); ++i) {
        velocity[i] = momentum * velocity[i] + grads[i];
        params[i] -= lr * velocity[i];
      }
      bar.update((begin + count) * world, loss_sum / static_cast<double>(step + 1),
                 step + 1 == result.steps_per_epoch);
    }
    EpochStats stats;
    stats.epoch = epoch + 1;
    stats.train_seconds = seconds_since(t0);
    stats.compute_seconds = compute_seconds;
    stats.exchange_seconds = exchange_seconds;
    stats.samples_per_second = static_cast<double>(shard_len * world) / stats.train_seconds;
    float mean_loss = static_cast<float>(loss_sum / static_cast<double>(result.steps_per_epoch));
    all_reduce_in_place(comm, &mean_loss, 1, ReduceOp::avg);
    stats.train_loss = mean_loss;
    const Eval e = evaluate(comm, net, params, test, options.test_batch_size);
    stats.test_loss = e.loss;
    stats.test_accuracy = e.accuracy;
    result.train_seconds += stats.train_seconds;
    result.epochs.push_back(stats);
    if (log != nullptr)
      *log << "epoch " << stats.epoch << ": train loss " << std::fixed << std::setprecision(4)
           << stats.train_loss << ", test loss " << stats.test_loss << ", test accuracy "
           << std::setprecision(2) << 100 * stats.test_accuracy << "% ("
           << static_cast<std::int64_t>(std::lround(stats.test_accuracy * test.size())) << "/"
           << test.size() << "), " << std::setprecision(2) << stats.train_seconds
           << " s (rank 0: compute " << std::setprecision(3) << stats.compute_seconds
           << " s, gradient exchange " << stats.exchange_seconds << " s)\n"
           << std::defaultfloat << std::flush;
  }
  result.final_parameters = std::move(params);
  return result;
}

TrainResult train(const Dataset& train_set, const Dataset& test_set, const TrainOptions& options,
                  std::ostream* log) {
  FC_ENFORCE_GE(options.workers, 1, "--workers");
  // One compute unit per virtual device: the workers' own host threads do the training math; the
  // device threads only move the gradient buffer.
  emu::World world({.world_size = options.workers, .device = {.compute_units = 1}});
  TrainResult result;
  world.run([&](Communicator& comm) {
    TrainResult mine = train_rank(comm, train_set, test_set, options, log);
    if (comm.rank() == 0) result = std::move(mine);
  });
  return result;
}

std::vector<ReportConfig> report_grid() {
  return {
      {"serial", 1, GradCompression::none},
      {"2 workers", 2, GradCompression::none},
      {"4 workers", 4, GradCompression::none},
      {"2 workers, fp16", 2, GradCompression::fp16},
      {"2 workers, fp8-e4m3", 2, GradCompression::fp8_e4m3},
      {"2 workers, fp8-e5m2", 2, GradCompression::fp8_e5m2},
      {"4 workers, fp16", 4, GradCompression::fp16},
      {"4 workers, fp8-e4m3", 4, GradCompression::fp8_e4m3},
      {"4 workers, fp8-e5m2", 4, GradCompression::fp8_e5m2},
  };
}

namespace {

// The machine may be shared; the report records how busy it was so the times can be judged.
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one_minute;
  in >> one_minute;
  return one_minute.empty() ? std::string("n/a") : one_minute;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  return "unknown CPU";
}

}  // namespace

void write_report(const Dataset& train_set, const Dataset& test_set, const TrainOptions& base,
                  const std::vector<ReportConfig>& grid, const std::string& out_dir,
                  const std::string& command, std::ostream& log) {
  FC_ENFORCE(!grid.empty(), "empty report grid");
  std::filesystem::create_directories(out_dir);
  std::vector<TrainResult> results;
  std::vector<std::string> loads;
  for (const auto& config : grid) {
    loads.push_back(load_average());
    TrainOptions o = base;
    o.workers = config.workers;
    o.exchange.compression = config.compression;
    log << "== " << config.name << " (" << config.workers << " worker"
        << (config.workers > 1 ? "s" : "") << ", compress " << to_string(config.compression)
        << ")\n";
    results.push_back(train(train_set, test_set, o, &log));
  }

  const std::filesystem::path dir(out_dir);
  {
    std::ofstream dat(dir / "accuracy.dat");
    for (std::size_t c = 0; c < grid.size(); ++c) {
      dat << "# " << grid[c].name << "\nepoch accuracy\n0 NaN\n";
      for (const auto& e : results[c].epochs)
        dat << e.epoch << " " << 100 * e.test_accuracy << "\n";
      dat << "\n\n";  // gnuplot: a new data set per configuration (`index`)
    }
  }
  {
    std::ofstream gp(dir / "accuracy.gp");
    gp << "set terminal pngcairo size 800,500\nset output 'accuracy.png'\n"
          "set title 'MNIST test accuracy per epoch'\nset xlabel 'epoch'\nset ylabel 'test "
          "accuracy (%)'\n"
          "set key bottom right\nset grid\nset xtics 1\nset datafile missing 'NaN'\nplot ";
    for (std::size_t c = 0; c < grid.size(); ++c)
      gp << (c ? ", \\\n     " : "") << "'accuracy.dat' index " << c
         << " using 1:2 with linespoints title '" << grid[c].name << "'";
    gp << "\n";
  }
  {
    std::ofstream md(dir / "results.md");
    md << "# MNIST data-parallel training: measured results\n\n"
       << "Generated by `" << command << "` (see docs/mnist.md).\n\n"
       << "Machine: " << cpu_model() << ", " << std::thread::hardware_concurrency()
       << " hardware threads; workers are threads of the fusedcoll emulator (one process).\n"
       << "Training set " << train_set.size() << " images, test set " << test_set.size()
       << " images; " << base.epochs << " epochs, batch " << base.batch_size << " per worker, lr "
       << base.lr << " x workers, momentum " << base.momentum << ", seed " << base.seed << ".\n\n"
       << "| configuration | workers | compression | training time (s) | s/epoch | final test "
          "accuracy | best test accuracy | bytes sent per step (rank 0) | steps/epoch | load "
          "average at start |\n"
       << "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n";
    for (std::size_t c = 0; c < grid.size(); ++c) {
      const auto& r = results[c];
      double best = 0;
      for (const auto& e : r.epochs) best = std::max(best, e.test_accuracy);
      md << "| " << grid[c].name << " | " << grid[c].workers << " | "
         << to_string(grid[c].compression) << " | " << std::fixed << std::setprecision(1)
         << r.train_seconds << " | " << r.train_seconds / r.epochs.size() << " | "
         << std::setprecision(2) << 100 * r.epochs.back().test_accuracy << "% | " << 100 * best
         << "% | " << r.bytes_per_step << " | " << r.steps_per_epoch << " | " << loads[c] << " |\n"
         << std::defaultfloat;
    }
    md << "\nTest accuracy (%) per epoch:\n\n| epoch |";
    for (const auto& g : grid) md << " " << g.name << " |";
    md << "\n|---:|";
    for (std::size_t c = 0; c < grid.size(); ++c) md << "---:|";
    md << "\n";
    for (std::size_t e = 0; e < results[0].epochs.size(); ++e) {
      md << "| " << e + 1 << " |";
      for (const auto& r : results)
        md << " " << std::fixed << std::setprecision(2) << 100 * r.epochs[e].test_accuracy << " |";
      md << std::defaultfloat << "\n";
    }
    md << "\n![test accuracy per epoch](accuracy.png)\n";
  }
  // gnuplot is optional (docs/mnist.md): without it the data and script are still written.
  const std::string plot = make_string(
      "cd '", dir.string(), "' && command -v gnuplot >/dev/null 2>&1 && gnuplot accuracy.gp");
  if (std::system(plot.c_str()) != 0)
    log << "note: gnuplot not found or failed; run `gnuplot accuracy.gp` in " << out_dir
        << " for the PNG\n";
  log << "report written to " << out_dir << "/results.md\n";
}

}  // namespace fusedcoll::mnist
