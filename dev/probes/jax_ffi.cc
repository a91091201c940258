// An XLA FFI handler that launches one of the family's compiled kernels on XLA's stream, with
// no Python at launch: the kernel is registered once (csm_register: a CUfunction from CuPy, its
// id returned), and a call passes its id, grid, block, dynamic shared memory and the integer
// arguments after the arrays (8-byte slots, as cusoftmax/_kernels.py's launcher); the load
// functor's struct is the Plain load's (zero bytes read). The driver's cuLaunchKernel is looked
// up in libcuda at the first launch, so no CUDA header or library is needed to build this.
#include <dlfcn.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using LaunchKernel = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, void*, void**, void**);

LaunchKernel launch_kernel() {
    static LaunchKernel fn = [] {
        void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        return lib ? reinterpret_cast<LaunchKernel>(dlsym(lib, "cuLaunchKernel")) : nullptr;
    }();
    return fn;
}

std::mutex registry_lock;
std::vector<void*> registry;  // id -> CUfunction, in this process only

ffi::Error Launch(void* stream, int64_t id, int64_t grid, int64_t block, int64_t smem,
                  ffi::Span<const int64_t> tail, ffi::RemainingArgs args, ffi::RemainingRets rets) {
    void* function;
    {
        std::lock_guard<std::mutex> hold(registry_lock);
        if (id < 0 || id >= static_cast<int64_t>(registry.size()))
            return ffi::Error(ffi::ErrorCode::kNotFound, "csm_launch: no kernel of that id here");
        function = registry[id];
    }
    LaunchKernel launch = launch_kernel();
    if (launch == nullptr) return ffi::Error(ffi::ErrorCode::kUnavailable, "csm_launch: no libcuda");
    std::vector<int64_t> slots;  // the arrays' addresses, the tail, 4 zero words of the load
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
    slots.insert(slots.end(), tail.begin(), tail.end());
    slots.insert(slots.end(), 4, 0);
    std::vector<void*> params;
    for (auto& slot : slots) params.push_back(&slot);
    const int rc = launch(function, static_cast<unsigned>(grid), 1, 1, static_cast<unsigned>(block),
                          1, 1, static_cast<unsigned>(smem), stream, params.data(), nullptr);
    if (rc != 0) return ffi::Error(ffi::ErrorCode::kInternal, "csm_launch: cuLaunchKernel failed");
    return ffi::Error::Success();
}

}  // namespace

extern "C" int64_t csm_register(void* function) {
    std::lock_guard<std::mutex> hold(registry_lock);
    registry.push_back(function);
    return static_cast<int64_t>(registry.size()) - 1;
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(csm_launch, Launch,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Attr<int64_t>("id")
                                  .Attr<int64_t>("grid")
                                  .Attr<int64_t>("block")
                                  .Attr<int64_t>("smem")
                                  .Attr<ffi::Span<const int64_t>>("tail")
                                  .RemainingArgs()
                                  .RemainingRets());
