/* Loads a CUDA library after nvshmem_init (plugin.cu, as an application loads a PyTorch
 * extension) and runs its kernel: the library's own device state must be filled, or its
 * nvshmem_int_p would use an empty state. Usage: plugin_main PATH/libplugin.so */
#include <dlfcn.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include "../common.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/libplugin.so\n", argv[0]);
        return 2;
    }
    nvshmem_init();
    select_device();
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    int *dest = (int *)nvshmem_calloc(1, sizeof(int));
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    FAIL_IF(lib == NULL, "plugin", "dlopen: %s", dlerror());
    typedef int (*send_fn)(int *, cudaStream_t);
    send_fn send = (send_fn)dlsym(lib, "plugin_send");
    FAIL_IF(send == NULL, "plugin", "dlsym: %s", dlerror());
    int err = send(dest, 0);
    FAIL_IF(err != 0, "plugin", "launch: %s", cudaGetErrorString((cudaError_t)err));
    CUDA_CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    int got = -1;
    CUDA_CHECK(cudaMemcpy(&got, dest, sizeof got, cudaMemcpyDeviceToHost));
    FAIL_IF(got != 100 + (me + n - 1) % n, "plugin", "got %d", got);
    printf("OK plugin pe=%d n=%d got=%d\n", me, n, got);
    nvshmem_free(dest);
    nvshmem_finalize();
    /* The library stays loaded to the end: its state registration is dropped at unload. */
    return 0;
}
