// The GPU proxy's request queue (gpu/proxy_queue.hpp) driven by host threads as the device's
// producers and one consumer thread as the proxy: the same protocol code the GPU's blocks run,
// checked here on every machine (and under ThreadSanitizer, scripts/test.sh). Records must arrive
// exactly once, each producer's in the order it posted them, through many wraps of a small ring;
// a full ring must make a producer give up after its timeout instead of hanging, and the consumer
// must stop at a ticket whose producer has not published it yet.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "gpu/proxy_queue.hpp"

namespace {

using namespace fusedcoll::gpu::proxy;

/// A queue's host memory: the ring, the producers' head and the consumer's tail.
struct Queue {
  explicit Queue(std::uint64_t capacity, std::uint64_t timeout_ns = 10'000'000'000ull)
      : ring(capacity) {
    view.ring = ring.data();
    view.capacity = capacity;
    view.head = &head;
    view.tail = &tail;
    view.timeout_ticks = timeout_ns;
  }
  std::vector<Record> ring;
  std::uint64_t head = 0, tail = 0;
  QueueView view;
};

TEST(GpuProxyQueue, RecordSizeIsOneLine) {
  EXPECT_EQ(sizeof(Record), 64u);
  EXPECT_EQ(alignof(Record), 64u);
}

TEST(GpuProxyQueue, ManyProducersEachInOrderThroughWraps) {
  for (std::uint64_t capacity : {1u, 2u, 8u, 64u}) {
    for (int producers : {1, 3, 6}) {
      Queue q(capacity);
      constexpr int kEach = 1000;
      std::vector<std::thread> threads;
      for (int p = 0; p < producers; ++p)
        threads.emplace_back([&q, p] {
          for (int i = 0; i < kEach; ++i) {
            // Puts and signals interleaved, numbered per producer: the consumer checks the order.
            const Record r = i % 3 == 2 ? make_signal(p % 4, i, static_cast<std::uint64_t>(i), p)
                                        : make_put(p % 4, 1, static_cast<std::uint64_t>(i),
                                                   0x1000u + static_cast<std::uint64_t>(p),
                                                   static_cast<std::uint64_t>(i) * 7, p);
            ASSERT_TRUE(post<HostOps>(q.view, r)) << "producer " << p << " record " << i;
          }
        });
      QueueReader reader(q.view, &q.tail);
      std::vector<int> next(static_cast<std::size_t>(producers), 0);
      std::uint64_t got = 0;
      const std::uint64_t total = static_cast<std::uint64_t>(producers) * kEach;
      while (got < total) {
        Record r;
        if (!reader.pop(r)) {
          std::this_thread::yield();
          continue;
        }
        ASSERT_EQ(r.seq, got + 1) << "tickets are taken in order";
        ASSERT_GE(r.producer, 0);
        ASSERT_LT(r.producer, producers);
        int& n = next[static_cast<std::size_t>(r.producer)];
        const bool is_signal = n % 3 == 2;
        ASSERT_EQ(r.kind, static_cast<std::uint32_t>(is_signal ? Kind::signal : Kind::put))
            << "capacity " << capacity << " producer " << r.producer << " record " << n;
        if (is_signal) {
          EXPECT_EQ(r.slot, n);
          EXPECT_EQ(r.value, static_cast<std::uint64_t>(n));
        } else {
          EXPECT_EQ(r.offset, static_cast<std::uint64_t>(n));
          EXPECT_EQ(r.bytes, static_cast<std::uint64_t>(n) * 7);
          EXPECT_EQ(r.src, 0x1000u + static_cast<std::uint64_t>(r.producer));
        }
        EXPECT_EQ(r.peer, r.producer % 4);
        ++n;
        ++got;
      }
      for (std::thread& t : threads) t.join();
      for (int p = 0; p < producers; ++p) EXPECT_EQ(next[static_cast<std::size_t>(p)], kEach);
      Record extra;
      EXPECT_FALSE(reader.pop(extra));
      EXPECT_EQ(reader.taken(), total);
    }
  }
}

TEST(GpuProxyQueue, FullRingGivesUpAfterTheTimeout) {
  Queue q(4, 20'000'000ull);  // 20 ms
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(post<HostOps>(q.view, make_signal(1, i, 1, 0)));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(post<HostOps>(q.view, make_signal(1, 4, 1, 0))) << "no consumer: the ring is full";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20));
  // The consumer still gets the four that fit, and stops at the abandoned ticket.
  QueueReader reader(q.view, &q.tail);
  Record r;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(reader.pop(r));
    EXPECT_EQ(r.slot, i);
  }
  EXPECT_FALSE(reader.pop(r));
}

TEST(GpuProxyQueue, ConsumerWaitsForAnUnpublishedTicket) {
  Queue q(8);
  // Ticket 0 is taken but its record not yet written (a slow producer); ticket 1 is published.
  const std::uint64_t t0 = HostOps::fetch_add(q.view.head, 1);
  ASSERT_TRUE(post<HostOps>(q.view, make_signal(2, 5, 1, 7)));
  QueueReader reader(q.view, &q.tail);
  Record r;
  EXPECT_FALSE(reader.pop(r)) << "ticket 0 is not published: nothing may overtake it";
  Record& slot = record_at(q.view, t0);
  slot = make_put(3, 0, 16, 0x2000, 32, 6);
  HostOps::publish(&slot.seq, t0 + 1);
  ASSERT_TRUE(reader.pop(r));
  EXPECT_EQ(r.kind, static_cast<std::uint32_t>(Kind::put));
  EXPECT_EQ(r.producer, 6);
  ASSERT_TRUE(reader.pop(r));
  EXPECT_EQ(r.kind, static_cast<std::uint32_t>(Kind::signal));
  EXPECT_EQ(r.producer, 7);
}

}  // namespace
