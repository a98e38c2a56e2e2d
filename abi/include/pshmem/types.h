/* proxyshmem: the type lists of NVSHMEM's typed names, written once for the device API
 * (rma.cuh, coll.cuh) and the compatibility headers (compat/nvshmem/), host and device. Each is
 * an X-macro: X(NAME, TYPE[, PSHMEM_DT_*]). Plain C. */
#ifndef PSHMEM_TYPES_H
#define PSHMEM_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "pshmem/abi.h"

/* NVSHMEM's standard RMA types (p, g, put, get, put-with-signal, broadcast, fcollect,
 * alltoall). */
#define PSHMEM_RMA_TYPES(X)                                                                     \
    X(float, float)                                                                             \
    X(double, double)                                                                           \
    X(char, char)                                                                               \
    X(schar, signed char)                                                                       \
    X(short, short)                                                                             \
    X(int, int)                                                                                 \
    X(long, long)                                                                               \
    X(longlong, long long)                                                                      \
    X(uchar, unsigned char)                                                                     \
    X(ushort, unsigned short)                                                                   \
    X(uint, unsigned int)                                                                       \
    X(ulong, unsigned long)                                                                     \
    X(ulonglong, unsigned long long)                                                            \
    X(int8, int8_t)                                                                             \
    X(int16, int16_t)                                                                           \
    X(int32, int32_t)                                                                           \
    X(int64, int64_t)                                                                           \
    X(uint8, uint8_t)                                                                           \
    X(uint16, uint16_t)                                                                         \
    X(uint32, uint32_t)                                                                         \
    X(uint64, uint64_t)                                                                         \
    X(size, size_t)                                                                             \
    X(ptrdiff, ptrdiff_t)

/* Integer reduction types of 32 and 64 bits, with the element type the host and on-stream
 * calls pass (as the C types are sized on LP64 Linux). */
#define PSHMEM_RED_WIDE_INT_TYPES(X)                                                            \
    X(int, int, PSHMEM_DT_INT32)                                                                \
    X(long, long, PSHMEM_DT_INT64)                                                              \
    X(longlong, long long, PSHMEM_DT_INT64)                                                     \
    X(ptrdiff, ptrdiff_t, PSHMEM_DT_INT64)                                                      \
    X(uint, unsigned int, PSHMEM_DT_UINT32)                                                     \
    X(ulong, unsigned long, PSHMEM_DT_UINT64)                                                   \
    X(ulonglong, unsigned long long, PSHMEM_DT_UINT64)                                          \
    X(int32, int32_t, PSHMEM_DT_INT32)                                                          \
    X(int64, int64_t, PSHMEM_DT_INT64)                                                          \
    X(uint32, uint32_t, PSHMEM_DT_UINT32)                                                       \
    X(uint64, uint64_t, PSHMEM_DT_UINT64)                                                       \
    X(size, size_t, PSHMEM_DT_UINT64)

/* Integer reduction types of 8 and 16 bits (device calls only). */
#define PSHMEM_RED_NARROW_INT_TYPES(X)                                                          \
    X(char, char)                                                                               \
    X(schar, signed char)                                                                       \
    X(short, short)                                                                             \
    X(uchar, unsigned char)                                                                     \
    X(ushort, unsigned short)                                                                   \
    X(int8, int8_t)                                                                             \
    X(int16, int16_t)                                                                           \
    X(uint8, uint8_t)                                                                           \
    X(uint16, uint16_t)

#endif /* PSHMEM_TYPES_H */
