// The XLA FFI handler of the JAX front (cusoftmax/_xla.py): one of the family's compiled kernels
// launched on XLA's stream inside a jitted program, with no Python at launch. Host C++, built
// with the C++ compiler against jaxlib's FFI headers (jax.ffi.include_dir()); the CUDA driver's
// entry points are looked up in libcuda at the first launch, so no CUDA header is needed.
//
// A launch is registered once per (call signature, device) at trace time (csm_new, csm_set): the
// CUfunction, grid, block, dynamic shared memory, whether it is cooperative, the workspace's
// head to zero, and the integer words after the addresses (the plan's tail, then the load
// functor's slots). A call passes the launch's id; its buffers are the kernel's arrays in order
// (operands, then results, the workspace last where the plan has one), each an 8-byte slot as
// in cusoftmax/_kernels.py's launcher.
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void*, void**, void**);
using CooperativeFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, void*, void**);
using MemsetFn = int (*)(unsigned long long, unsigned char, size_t, void*);

struct Driver {
    LaunchFn launch = nullptr;
    CooperativeFn cooperative = nullptr;
    MemsetFn memset = nullptr;
};

const Driver* driver() {
    static const Driver found = [] {
        Driver d;
        if (void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
            d.launch = reinterpret_cast<LaunchFn>(dlsym(lib, "cuLaunchKernel"));
            d.cooperative =
                reinterpret_cast<CooperativeFn>(dlsym(lib, "cuLaunchCooperativeKernel"));
            d.memset = reinterpret_cast<MemsetFn>(dlsym(lib, "cuMemsetD8Async"));
        }
        return d;
    }();
    return found.launch && found.cooperative && found.memset ? &found : nullptr;
}

struct Spec {
    void* function = nullptr;
    unsigned grid = 0, block = 0, smem = 0;
    bool cooperative = false;
    int64_t zeroed = 0;          // head bytes of the workspace (the last result) to zero first
    std::vector<int64_t> words;  // the slots after the addresses
};

std::mutex registry_lock;
// id -> device ordinal -> launch (null: none for that device), in this process. A launch is
// immutable once set, so a call holds its pointer and reads it without the lock.
std::vector<std::vector<std::shared_ptr<const Spec>>> registry;

ffi::Error Launch(void* stream, int32_t ordinal, int64_t id, ffi::RemainingArgs args,
                  ffi::RemainingRets rets) {
    std::shared_ptr<const Spec> found;
    {
        std::lock_guard<std::mutex> hold(registry_lock);
        if (id >= 0 && id < static_cast<int64_t>(registry.size()) && ordinal >= 0 &&
            ordinal < static_cast<int32_t>(registry[id].size()))
            found = registry[id][ordinal];
    }
    if (found == nullptr || found->function == nullptr)
        return ffi::Error(ffi::ErrorCode::kNotFound,
                          "cusoftmax: no kernel registered for this call on this device");
    const Spec& spec = *found;
    const Driver* cuda = driver();
    if (cuda == nullptr)
        return ffi::Error(ffi::ErrorCode::kUnavailable, "cusoftmax: libcuda.so.1 not found");
    std::vector<int64_t> slots;
    slots.reserve(args.size() + rets.size() + spec.words.size());
    for (size_t i = 0; i < args.size(); ++i) {
        auto buffer = args.get<ffi::AnyBuffer>(i);
        if (buffer.has_error()) return buffer.error();
        slots.push_back(reinterpret_cast<int64_t>(buffer.value().untyped_data()));
    }
    for (size_t i = 0; i < rets.size(); ++i) {
        auto buffer = rets.get<ffi::AnyBuffer>(i);
        if (buffer.has_error()) return buffer.error();
        slots.push_back(reinterpret_cast<int64_t>(buffer.value()->untyped_data()));
    }
    for (int64_t address : slots)  // the kernels read and write in 16-byte packs
        if (address % 16 != 0)
            return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                              "cusoftmax: a buffer off a 16-byte boundary");
    if (spec.zeroed > 0 &&
        cuda->memset(static_cast<unsigned long long>(slots.back()), 0,
                     static_cast<size_t>(spec.zeroed), stream) != 0)
        return ffi::Error(ffi::ErrorCode::kInternal, "cusoftmax: cuMemsetD8Async failed");
    slots.insert(slots.end(), spec.words.begin(), spec.words.end());
    std::vector<void*> params;
    params.reserve(slots.size());
    for (auto& slot : slots) params.push_back(&slot);
    const int rc = spec.cooperative
        ? cuda->cooperative(spec.function, spec.grid, 1, 1, spec.block, 1, 1, spec.smem, stream,
                            params.data())
        : cuda->launch(spec.function, spec.grid, 1, 1, spec.block, 1, 1, spec.smem, stream,
                       params.data(), nullptr);
    if (rc != 0) return ffi::Error(ffi::ErrorCode::kInternal, "cusoftmax: kernel launch failed");
    return ffi::Error::Success();
}

}  // namespace

extern "C" int64_t csm_new() {
    std::lock_guard<std::mutex> hold(registry_lock);
    registry.emplace_back();
    return static_cast<int64_t>(registry.size()) - 1;
}

extern "C" int csm_set(int64_t id, int32_t ordinal, void* function, int64_t grid, int64_t block,
                       int64_t smem, int32_t cooperative, int64_t zeroed, int64_t count,
                       const int64_t* words) {
    std::lock_guard<std::mutex> hold(registry_lock);
    if (id < 0 || id >= static_cast<int64_t>(registry.size()) || ordinal < 0) return 1;
    auto spec = std::make_shared<Spec>();
    spec->function = function;
    spec->grid = static_cast<unsigned>(grid);
    spec->block = static_cast<unsigned>(block);
    spec->smem = static_cast<unsigned>(smem);
    spec->cooperative = cooperative != 0;
    spec->zeroed = zeroed;
    spec->words.assign(words, words + count);
    auto& per_device = registry[id];
    if (static_cast<int32_t>(per_device.size()) <= ordinal) per_device.resize(ordinal + 1);
    per_device[ordinal] = std::move(spec);
    return 0;
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(csm_launch, Launch,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Attr<int64_t>("id")
                                  .RemainingArgs()
                                  .RemainingRets());
