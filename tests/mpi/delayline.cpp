// fusedcoll-delayline: the link emulator scripts/netns-cluster uses where the kernel has no
// sch_netem (docs/mpi.md, "A cluster of network namespaces"). Test infrastructure, not library.
//
//   fusedcoll-delayline --host NS [--host NS ...] --net A.B.C --ready FILE
//                       [--delay TIME] [--loss PERCENT] [--seed S] [--drop H:SECONDS]...
//                       [--lifetime SECONDS]
//
// For each --host (host H = its position, 1-based) it makes a TUN device `eth0` inside network
// namespace NS (/var/run/netns/NS), then touches FILE. The script gives each device the address
// A.B.C.H, its MTU and its tc qdiscs. Every IPv4 packet a host sends into its `eth0` is read here,
// held for TIME (tc units: 50us, 1ms; a bare number is microseconds, as in tc), and written into
// the `eth0` of the host that owns its destination address; anything else is dropped. --loss
// drops each packet with that probability (a seeded generator: the same run drops the same
// packets). --drop H:S cuts host H's link S seconds after start: every packet from or to H is
// dropped from then on, as `netem loss 100%` on both ends would.
//
// Why this shape: one thread, epoll over the TUN descriptors and one timerfd armed at the oldest
// packet's deadline. The delay is constant, so a FIFO is in deadline order. Timer slack 1 ns for a
// precise wake-up, but no spinning: the machine this runs on shares its 2 cores with the ranks.
// A timer wake-up is late by ~20 us on a busy VM (measured: a 50 us delay added 68 us per
// crossing), so the timer is armed early by a running average of its lateness and a packet
// leaves when it is due within half of that; the error is then centred on the delay.
// It ends with its parent (PR_SET_PDEATHSIG), on SIGTERM/SIGINT, or after --lifetime; the TUN
// devices disappear with its descriptors.

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// A TUN device's MTU is at most 65535; a read never returns more.
constexpr std::size_t kMaxPacket = 65536;
// Packets held at once. At 10 Gbit/s and 64 KB packets, 50 us holds one or two; the rest is slack
// for a late wake-up. Beyond it a packet is dropped, as a full netem queue would.
constexpr std::size_t kMaxHeld = 2048;
// Reads per descriptor per wake-up, so that one busy host cannot starve the others or the timer.
constexpr int kReadBatch = 64;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fusedcoll-delayline: %s\n", what.c_str());
  std::exit(1);
}

[[noreturn]] void die_errno(const std::string& what) { die(what + ": " + std::strerror(errno)); }

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// tc's time syntax: a number with s/sec/ms/msec/us/usec/ns/nsec, or a bare number of microseconds.
std::int64_t parse_time_ns(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit(end);
  double scale = 0;
  if (unit.empty() || unit == "us" || unit == "usec")
    scale = 1e3;
  else if (unit == "s" || unit == "sec" || unit == "secs")
    scale = 1e9;
  else if (unit == "ms" || unit == "msec" || unit == "msecs")
    scale = 1e6;
  else if (unit == "ns" || unit == "nsec" || unit == "nsecs")
    scale = 1;
  if (end == s.c_str() || scale == 0 || !(v >= 0) || v * scale > 10e9)
    die("bad time '" + s + "' (expected e.g. 50us, 1ms; at most 10 s)");
  return static_cast<std::int64_t>(v * scale + 0.5);
}

double parse_number(const std::string& s, const char* what) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || (*end != '\0' && std::string(end) != "%") || !(v >= 0))
    die(std::string("bad ") + what + " '" + s + "'");
  return v;
}

struct Packet {
  std::int64_t due_ns;
  int to;  // host index, 0-based
  std::size_t len;
  std::vector<unsigned char> bytes;
};

struct Drop {
  int host;  // 0-based
  std::int64_t at_ns;
};

int open_tun_in(const std::string& ns, int home_ns) {
  const std::string path = "/var/run/netns/" + ns;
  const int nsfd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (nsfd < 0) die_errno("cannot open " + path);
  if (setns(nsfd, CLONE_NEWNET) != 0) die_errno("cannot enter network namespace " + ns);
  close(nsfd);
  // The device belongs to the namespace this thread is in when it is made.
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die_errno("cannot open /dev/net/tun");
  ifreq ifr{};
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::strncpy(ifr.ifr_name, "eth0", IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) != 0) die_errno("cannot make TUN device eth0 in " + ns);
  if (setns(home_ns, CLONE_NEWNET) != 0) die_errno("cannot return to the home namespace");
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> namespaces;
  std::string net, ready;
  std::int64_t delay_ns = 0;
  double loss = 0;
  std::uint64_t seed = 1;
  double lifetime_s = 3600;
  std::vector<std::pair<int, double>> drop_args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("option " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--host")
      namespaces.push_back(value());
    else if (a == "--net")
      net = value();
    else if (a == "--ready")
      ready = value();
    else if (a == "--delay")
      delay_ns = parse_time_ns(value());
    else if (a == "--loss")
      loss = parse_number(value(), "loss");
    else if (a == "--seed")
      seed = static_cast<std::uint64_t>(parse_number(value(), "seed"));
    else if (a == "--lifetime")
      lifetime_s = parse_number(value(), "lifetime");
    else if (a == "--drop") {
      const std::string v = value();
      const auto colon = v.find(':');
      if (colon == std::string::npos) die("bad --drop '" + v + "' (expected H:SECONDS)");
      drop_args.emplace_back(static_cast<int>(parse_number(v.substr(0, colon), "host")),
                             parse_number(v.substr(colon + 1), "seconds"));
    } else
      die("unknown option " + a + " (see the top of tests/mpi/delayline.cpp)");
  }
  if (namespaces.empty() || namespaces.size() > 254) die("give 1 to 254 --host namespaces");
  if (ready.empty()) die("--ready FILE is required");
  if (loss > 100) die("--loss is a percentage, at most 100");
  unsigned net_bytes[3];
  char tail = 0;
  if (std::sscanf(net.c_str(), "%u.%u.%u%c", &net_bytes[0], &net_bytes[1], &net_bytes[2], &tail) !=
          3 ||
      net_bytes[0] > 255 || net_bytes[1] > 255 || net_bytes[2] > 255)
    die("--net must be the first three bytes of an IPv4 /24, e.g. 10.213.0");
  const int hosts = static_cast<int>(namespaces.size());

  // Ends with the script that started it, even if that one is killed outright.
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) return 0;
  prctl(PR_SET_TIMERSLACK, 1UL);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);
  sigprocmask(SIG_BLOCK, &stop, nullptr);

  const int home_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home_ns < 0) die_errno("cannot open /proc/self/ns/net");
  std::vector<int> tun(static_cast<std::size_t>(hosts));
  for (int h = 0; h < hosts; ++h) tun[h] = open_tun_in(namespaces[h], home_ns);

  const int ep = epoll_create1(EPOLL_CLOEXEC);
  const int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  const int sigs = signalfd(-1, &stop, SFD_NONBLOCK | SFD_CLOEXEC);
  if (ep < 0 || timer < 0 || sigs < 0) die_errno("cannot make epoll / timerfd / signalfd");
  auto watch = [&](int fd, std::uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) die_errno("epoll_ctl");
  };
  for (int h = 0; h < hosts; ++h) watch(tun[h], static_cast<std::uint64_t>(h));
  constexpr std::uint64_t kTimerTag = 1000, kSignalTag = 1001;
  watch(timer, kTimerTag);
  watch(sigs, kSignalTag);

  const std::int64_t start = now_ns();
  const std::int64_t end = start + static_cast<std::int64_t>(lifetime_s * 1e9);
  std::vector<Drop> drops;
  for (auto [h, s] : drop_args) {
    if (h < 1 || h > hosts)
      die("--drop names host " + std::to_string(h) + " of " + std::to_string(hosts));
    drops.push_back({h - 1, start + static_cast<std::int64_t>(s * 1e9)});
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 100.0);

  if (FILE* f = std::fopen(ready.c_str(), "w"))
    std::fclose(f);
  else
    die_errno("cannot write " + ready);

  std::deque<Packet> held;
  std::vector<std::vector<unsigned char>> spare;
  std::uint64_t forwarded = 0, dropped = 0;
  auto cut = [&](int h, std::int64_t t) {
    for (const Drop& d : drops)
      if (d.host == h && t >= d.at_ns) return true;
    return false;
  };
  auto send = [&](int to, const unsigned char* p, std::size_t len) {
    // A host whose device is gone or down refuses the write (EIO): the packet is lost, as on a
    // link whose far end is down.
    if (write(tun[to], p, len) == static_cast<ssize_t>(len))
      ++forwarded;
    else
      ++dropped;
  };

  std::int64_t armed = -1;   // when the timer is set to fire, -1 if unset
  std::int64_t late_ns = 0;  // running average of how late it fires
  bool sleeping = false;     // armed far enough ahead for its lateness to be a wake-up's
  epoll_event events[64];
  for (;;) {
    const std::int64_t t0 = now_ns();
    if (t0 >= end) break;
    const int timeout_ms = static_cast<int>((end - t0) / 1000000) + 1;
    const int n = epoll_wait(ep, events, 64, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      die_errno("epoll_wait");
    }
    bool quit = false;
    for (int e = 0; e < n; ++e) {
      const std::uint64_t tag = events[e].data.u64;
      if (tag == kSignalTag) quit = true;
      if (tag == kTimerTag) {
        std::uint64_t expirations;
        (void)!read(timer, &expirations, sizeof expirations);
        if (armed >= 0 && sleeping) {
          const std::int64_t l =
              std::min<std::int64_t>(std::max<std::int64_t>(now_ns() - armed, 0), delay_ns);
          late_ns += (l - late_ns) / 8;
        }
        armed = -1;
      }
      if (tag >= static_cast<std::uint64_t>(hosts)) continue;
      const int from = static_cast<int>(tag);
      for (int r = 0; r < kReadBatch; ++r) {
        std::vector<unsigned char> buf;
        if (!spare.empty()) {
          buf = std::move(spare.back());
          spare.pop_back();
        } else {
          buf.resize(kMaxPacket);
        }
        const ssize_t len = read(tun[from], buf.data(), buf.size());
        if (len < 0) {
          spare.push_back(std::move(buf));
          if (errno == EAGAIN || errno == EINTR) break;
          die_errno("read from host " + std::to_string(from + 1) + "'s TUN device");
        }
        const std::int64_t t = now_ns();
        // IPv4 only (version nibble 4, destination in bytes 16..19) and only within the net.
        int to = -1;
        if (len >= 20 && (buf[0] >> 4) == 4 && buf[16] == net_bytes[0] && buf[17] == net_bytes[1] &&
            buf[18] == net_bytes[2] && buf[19] >= 1 && buf[19] <= hosts)
          to = buf[19] - 1;
        const bool lost = to < 0 || cut(from, t) || cut(to, t) ||
                          (loss > 0 && uniform(rng) < loss) || held.size() >= kMaxHeld;
        if (lost) {
          ++dropped;
          spare.push_back(std::move(buf));
        } else if (delay_ns == 0) {
          send(to, buf.data(), static_cast<std::size_t>(len));
          spare.push_back(std::move(buf));
        } else {
          held.push_back({t + delay_ns, to, static_cast<std::size_t>(len), std::move(buf)});
        }
      }
    }
    if (quit) break;
    const std::int64_t t = now_ns();
    while (!held.empty() && held.front().due_ns <= t + late_ns / 2) {
      Packet& p = held.front();
      // A link cut while the packet was in flight loses it too.
      if (cut(p.to, t))
        ++dropped;
      else
        send(p.to, p.bytes.data(), p.len);
      spare.push_back(std::move(p.bytes));
      held.pop_front();
    }
    if (spare.size() > 64) spare.resize(64);
    if (!held.empty() && armed < 0) {
      // Early by the average lateness; a time already past fires at once.
      armed = std::max(held.front().due_ns - late_ns, t + 1);
      sleeping = armed - t > 5000;
      itimerspec its{};
      its.it_value.tv_sec = armed / 1000000000;
      its.it_value.tv_nsec = armed % 1000000000;
      if (timerfd_settime(timer, TFD_TIMER_ABSTIME, &its, nullptr) != 0) die_errno("timerfd");
    }
  }
  std::fprintf(stderr, "fusedcoll-delayline: %llu packets forwarded, %llu dropped\n",
               static_cast<unsigned long long>(forwarded),
               static_cast<unsigned long long>(dropped));
  return 0;
}
