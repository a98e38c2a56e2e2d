/* A probe table: the C compiler's view of shared headers (sizes, field offsets, constants), by
 * name, for Rust tests that compare their mirrors with it (crate pshmem-abi-probe). A probe
 * source includes the headers it checks, then this file, then lists its entries:
 *
 *     PSHMEM_PROBE_TABLE(pshmem_ep_probe,
 *         SIZE(pshmem_ep_ll_args_t), OFF(pshmem_ep_ll_args_t, x), VAL(PSHMEM_EP_THREADS))
 *
 * which defines `const struct pshmem_probe_entry *pshmem_ep_probe(size_t *n)`. Only tests call
 * a table, so no shipped library links one. */
#ifndef PSHMEM_PROBE_H
#define PSHMEM_PROBE_H
#include <stddef.h>

struct pshmem_probe_entry {
    const char *name;
    unsigned long long value;
};

#define SIZE(t) {"sizeof " #t, sizeof(t)}
#define OFF(t, f) {#t "." #f, offsetof(t, f)}
#define VAL(v) {#v, (unsigned long long)(v)}

#define PSHMEM_PROBE_TABLE(fn, ...)                                                 \
    static const struct pshmem_probe_entry fn##_entries[] = {__VA_ARGS__};          \
    const struct pshmem_probe_entry *fn(size_t *n);                                 \
    const struct pshmem_probe_entry *fn(size_t *n) {                                \
        *n = sizeof(fn##_entries) / sizeof(fn##_entries[0]);                        \
        return fn##_entries;                                                        \
    }

#endif
