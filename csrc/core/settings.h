// Every setting of a communicator, once. Each row: the name (the key of the
// config dict that pycomm._C speaks), the field of
// CommConfig (tuning.h) it sets, the environment variable that overrides it,
// that variable's unit and the factor from it to the field's unit, the default
// for `world` ranks on a host where the process may run on `cores` cores, and
// why the setting exists. tuning.h's default_config(), the config dict of
// csrc/torch/module.cpp and Python's environment table (pycomm/config.py,
// through csrc/torch/tables_bindings.cpp) are all made from this list; nothing else names a
// setting or states its default. Measured on the 2-core CI host
// (bench/collectives_perf.py) unless a row says otherwise. The bounds, in the
// field's unit, are what a value may be from any source (setting_bounds.h says
// why each limit is what it is; settings_check.h checks them).
#pragma once

#include "setting_bounds.h"

// X(name, field, env, unit, factor, bounds, default, why)
#define PYCOMM_SETTINGS(X)                                                                         \
  X(timeout_s, wait.timeout_s, "PYCOMM_TIMEOUT", "s", 1,                                            \
    between(kMinTimeoutS, kMaxTimeoutS), 300.0,                                                     \
    "every wait ends after this long, set-up included (the group's own timeout when pycomm is "   \
    "the backend)")                                                                                \
  /* Spinning helps only when every rank has a core of its own; with more ranks than cores it   \
     burns the time slice the awaited rank needs (3 ranks on 2 cores: 8-byte ring all-reduce     \
     98 us with a 20 us spin, 16 us without; measured once on 2026-11-30). */                                                   \
  X(spin_us, wait.spin_us, "PYCOMM_SPIN_US", "us", 1,                                               \
    between(0, kMaxWaitUs), (world <= cores ? 20.0 : 0.0),                                          \
    "a waiting rank spins this long before it yields (0 when ranks outnumber cores)")            \
  /* Inside a stream (the ring's links, after the handshake: both ranks are there), the next     \
     buffer comes once the peer has filled one, 256 KiB at a few GB/s: about 50-60 us. A spin     \
     shorter than that gives up on a peer that is running and hands the core to whoever waits    \
     for it (DDP's backward), and the stream stalls a time slice. ResNet-50 under DDP, 2 ranks,  \
     2 rounds each in turns: the buckets' all-reduces ran 107-131 ms a step with a 20 us spin,   \
     42-59 ms with 60 us; the worker's CPU time 19.5-19.9 -> 18.1-18.3 ms a step; backend over    \
     sync-only 1.039/1.039 -> 1.026/1.017. 200 us burned more CPU (18.9-19.9 ms). Measured once on  \
     2026-12-02. */                                                                                 \
  X(stream_spin_us, wait.stream_spin_us, "PYCOMM_STREAM_SPIN_US", "us", 1, between(0, kMaxWaitUs),  \
    (world <= cores ? 64.0 : 0.0),                                                                 \
    "a rank waiting for the next buffer of a ring stream spins this long before it yields "      \
    "(0 when ranks outnumber cores)")                                                              \
  X(yield_us, wait.yield_us, "PYCOMM_YIELD_US", "us", 1, between(0, kMaxWaitUs), 200.0,             \
    "then yields this long before it sleeps on a futex")                                          \
  /* auto takes memfd wherever it works (memfd_unavailable_reason() says why not) and every     \
     rank allows it; posix is the named-file path, for hosts that refuse memfds or abstract      \
     sockets (seccomp profiles, old kernels). The group's ranks agree at set-up. */              \
  X(shm_transport, shm_transport, "PYCOMM_SHM_TRANSPORT", "auto/memfd/posix", 1, kChoice,           \
    std::string("auto"),                                                                           \
    "how the group's shared memory travels between its ranks: memfd (anonymous, passed over a "  \
    "Unix socket; nothing in /dev/shm) or posix (files in PYCOMM_SHM_DIR, else /dev/shm)")       \
  X(slot_bytes, data.slot_bytes, "PYCOMM_DIRECT_KB", "KiB", 1024,                                   \
    between(kMinBufferBytes, kMaxBufferBytes), size_t(256 * 1024),                                  \
    "each rank's slot for the one-shot collectives; larger messages go through it in pieces")    \
  X(link_bytes, data.link_bytes, "PYCOMM_RING_BUFFER_KB", "KiB", 1024,                              \
    between(kMinBufferBytes, kMaxBufferBytes), size_t(256 * 1024),                                  \
    "each buffer of the ring's link (to rank+1); all-to-all's other links share 512 KiB a rank, " \
    "in buffers of at most this size")                                                             \
  X(link_buffers, data.link_buffers, "PYCOMM_RING_BUFFERS", "count", 1,                             \
    between(2, kMaxDepth), size_t(4),                                                               \
    "buffers per link: how far a sender may run ahead of its receiver")                           \
  X(p2p_frame_bytes, p2p.frame_bytes, "PYCOMM_P2P_FRAME_KB", "KiB", 1024,                           \
    between(kMinBufferBytes, kMaxBufferBytes), size_t(256 * 1024),                                  \
    "each frame of a point-to-point channel; larger messages stream through in frames")         \
  X(p2p_frames, p2p.frames, "PYCOMM_P2P_FRAMES", "count", 1, between(1, kMaxDepth), size_t(4),      \
    "frames per point-to-point channel: how far a sender may run ahead of its receiver")         \
  /* Two ranks: the pipelined ring beats the one-shot from 32 B up (32 KiB: 4.4 us vs 9.6 us);   \
     three or four: the one-shot, with its single synchronisation, is faster up to about         \
     64 KiB (measured once on 2026-12-02). */                                                                                    \
  X(direct_max_bytes, tuning.direct_max_bytes, "PYCOMM_DIRECT_MAX_KB", "KiB", 1024,                 \
    between(0, kMaxThresholdBytes),                                                                 \
    size_t(world == 2 ? 64 : 64 * 1024),                                                           \
    "algorithm=auto: one shot up to this many bytes per rank, the ring above")                    \
  /* A rank owns its share of the host's cores; one thread moving a large message uses one of   \
     them. thread_scaling (csrc/core/bench) on a 16-core host: float32 sums of 16 MiB buffers     \
     3.5x faster on 8 threads than on 1, copies 3.6x; on this 2-core host 1.2-1.8x on 2. */        \
  X(team_threads, tuning.team_threads, "PYCOMM_THREADS", "count", 1, between(1, kMaxThreads),       \
    size_t(std::max(1, cores / std::max(1, world))),                                               \
    "threads that copy and reduce each large piece, the rank's own included: its cores over the " \
    "ranks on the host (1 when ranks fill the cores); more oversubscribes the cores")            \
  /* A share must outweigh waking a helper (a few microseconds when it spins, tens when it       \
     sleeps): 32 KiB is 3 us at 10 GB/s. A 256 KiB piece splits 8 ways at most. */                \
  X(team_share_bytes, tuning.team_share_bytes, "PYCOMM_TEAM_SHARE_KB", "KiB", 1024,                 \
    between(0, kMaxBufferBytes),                                                                    \
    size_t(32 * 1024), "a piece is split among the threads only into shares of at least this size") \
  /* Where ranks are pinned to several NUMA domains. auto takes two_level where it moves no    \
     more bytes a rank than the ring (routing.cpp: from about 6 ranks a domain with 2 domains),  \
     which it then beats on the link between sockets; no host of two sockets has measured it   \
     yet (bench/numa_perf.py, bench/gpu_check.sh's cpu_numa step). */                            \
  X(two_level, tuning.two_level, "PYCOMM_TWO_LEVEL", "auto/on/off", 1,                              \
    kChoice, std::string("auto"),                                                                   \
    "ranks pinned to several NUMA domains (of 2 ranks or more): auto takes the two-level "        \
    "all-reduce where it moves no more bytes than the ring, on wherever the domains allow, off "  \
    "never")                                                                                       \
  X(two_level_min_bytes, tuning.two_level_min_bytes, "PYCOMM_TWO_LEVEL_MIN_KB", "KiB", 1024,        \
    between(0, kMaxThresholdBytes),                                                                 \
    size_t(256) << 10,                                                                             \
    "the two-level all-reduce only above this size (and above direct_max_bytes)")                 \
  /* auto takes cross-memory attach wherever every rank can read every peer (the probe at     \
     set-up, transport/cross_memory.h); off keeps every byte on the staging path. */            \
  X(single_copy, tuning.single_copy, "PYCOMM_SINGLE_COPY", "auto/cma/off", 1,                       \
    kChoice, std::string("auto"),                                                                   \
    "large messages copied once, straight out of the peer's memory (cma: process_vm_readv), "   \
    "where every rank can read every peer: auto where the probe at set-up succeeds, cma "      \
    "required (set-up fails where it cannot be had), off never")                                \
  /* 2 ranks, in turns with the staging path: 16 KiB a tie (all_gather 5.5 us either way, all_to_all \
     6.9 against 7.1), 32 KiB a gain (all_gather 5.9 against 7.1, all_to_all 7.3 against 8.6); measured once on     \
     2026-12-05. */   \
  X(single_copy_min_bytes, tuning.single_copy_min_bytes, "PYCOMM_SINGLE_COPY_MIN_KB", "KiB", 1024,  \
    between(0, kMaxThresholdBytes),                                                                 \
    size_t(32) << 10,                                                                              \
    "messages (per rank) of at least this size take the single copy; smaller ones the staging "  \
    "path, whose two copies cost less than the call into the kernel")                            \
  /* broadcast, 2 ranks: 1 MiB 64.4 us either way; 2 MiB 199 single copy, 158 staged (measured once on  \
     2026-12-05). */         \
  X(single_copy_rooted_max_bytes, tuning.single_copy_rooted_max_bytes, "PYCOMM_SINGLE_COPY_ROOTED_MAX_KB", \
    "KiB", 1024, between(0, kMaxThresholdBytes), size_t(1) << 20,                                  \
    "broadcast, gather and scatter take the single copy only up to this size: above it the "     \
    "staging path's copy in (the root) and copies out (the others) overlap, where the single "   \
    "copy leaves the root idle")                                                                   \
  X(restore_on_failure, tuning.restore_on_failure, "PYCOMM_RESTORE_ON_FAILURE", "0/1", 1,           \
    between(0, 1), true,                                                                            \
    "pycomm.all_reduce puts its tensor back when it fails part way (input_backup.h)")             \
  /* Not yet measured on a GPU: large enough that a 25 MiB DDP bucket goes in one piece. */       \
  X(cuda_buffer_bytes, tuning.cuda_buffer_bytes, "PYCOMM_CUDA_BUFFER_MB", "MiB", 1 << 20,           \
    between(0, kMaxBufferBytes),                                                                    \
    size_t(32) << 20, "each rank's device staging buffer; larger all-reduces go in pieces")      \
  /* 4 ranks as 2 fake hosts on the 2-core host (bench/collectives_perf.py --hosts 2): at 64 KiB \
     the leader form took 384 us in all, the shard form's gloo part alone 552 us. Larger sizes   \
     were not compared between the two forms. */                                                  \
  X(hier_leader_max_bytes, hierarchy.leader_max_bytes, "PYCOMM_HIER_LEADER_MAX_KB", "KiB", 1024,    \
    between(0, kMaxThresholdBytes),                                                                 \
    size_t(64) << 10,                                                                              \
    "across hosts: all-reduces up to this size go through each host's first rank (leader), "     \
    "larger ones reduce-scatter, all-reduce a shard between hosts and all-gather (rs-ar-ag)")     \
  X(hier_piece_bytes, hierarchy.piece_bytes, "PYCOMM_HIER_PIECE_KB", "KiB", 1024,                   \
    between(0, kMaxBufferBytes),                                                                    \
    size_t(4) << 20,                                                                               \
    "rs-ar-ag runs in pieces of this size, pipelined: gloo reduces one while shared memory "     \
    "scatters the next and gathers the one before")
