/* non_abi/nvshmemx_error.h — proxyshmem's NVSHMEM compatibility header: the error-reporting
 * macros NVSHMEM documents for programs and its own tests (NVSHMEMI_ERROR_PRINT and friends),
 * reached from nvshmemx.h as NVSHMEM's are, with the C headers they need (errno, limits, stdio,
 * stdlib, string). Written from NVSHMEM's documented behaviour:
 * - NVSHMEMI_ERROR_PRINT(fmt, ...): "file:function:line: " and the message on stderr;
 *   NVSHMEMI_ERROR_EXIT the same, then exit(-1); NVSHMEMI_WARN_PRINT "WARN: " and the message on
 *   stdout.
 * - NVSHMEMI_*_ERROR_JMP(..., status, err, label, fmt, ...): when the condition holds, report
 *   (file:line, the status seen, the message), set `status` to `err` and `goto label`.
 * - NVSHMEMI_NZ_EXIT(status, fmt, ...) and NVSHMEMI_NZ_SYSCHECK_EXIT(sys_status, fmt, ...):
 *   report and exit(-1) on a non-zero status (with strerror of errno, resp. of the status).
 * Every message ends with a newline. */
#ifndef PSHMEM_COMPAT_NVSHMEMX_ERROR_H
#define PSHMEM_COMPAT_NVSHMEMX_ERROR_H

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The caller's printf-style text, then the line's end. */
#define PSHMEMI_COMPAT_TAIL(stream, ...)                                                      \
    do {                                                                                      \
        fprintf(stream, __VA_ARGS__);                                                         \
        fputc('\n', stream);                                                                  \
    } while (0)

/* `cond` holds: report `head` (a format and its arguments, in parentheses), then the caller's
 * text; status = err; goto label. */
#define PSHMEMI_COMPAT_JMP_IF(cond, head, status, err, label, ...)                            \
    do {                                                                                      \
        if (cond) {                                                                           \
            fprintf head;                                                                     \
            PSHMEMI_COMPAT_TAIL(stderr, __VA_ARGS__);                                         \
            (status) = (err);                                                                 \
            goto label;                                                                       \
        }                                                                                     \
    } while (0)

#define NVSHMEMI_ERROR_PRINT(...)                                                             \
    do {                                                                                      \
        fprintf(stderr, "%s:%s:%d: ", __FILE__, __func__, __LINE__);                          \
        PSHMEMI_COMPAT_TAIL(stderr, __VA_ARGS__);                                             \
    } while (0)

#define NVSHMEMI_ERROR_EXIT(...)                                                              \
    do {                                                                                      \
        NVSHMEMI_ERROR_PRINT(__VA_ARGS__);                                                    \
        exit(-1);                                                                             \
    } while (0)

#define NVSHMEMI_WARN_PRINT(...)                                                              \
    do {                                                                                      \
        fputs("WARN: ", stdout);                                                              \
        PSHMEMI_COMPAT_TAIL(stdout, __VA_ARGS__);                                             \
    } while (0)

#define NVSHMEMI_ERROR_JMP(status, err, label, ...)                                           \
    PSHMEMI_COMPAT_JMP_IF(1, (stderr, "%s:%d: non-zero status: %d ", __FILE__, __LINE__,      \
                              (int)(err)), status, err, label, __VA_ARGS__)

#define NVSHMEMI_NULL_ERROR_JMP(var, status, err, label, ...)                                 \
    PSHMEMI_COMPAT_JMP_IF((var) == NULL, (stderr, "%s:%d: NULL value ", __FILE__, __LINE__),  \
                          status, err, label, __VA_ARGS__)

#define NVSHMEMI_EQ_ERROR_JMP(status, expected, err, label, ...)                              \
    PSHMEMI_COMPAT_JMP_IF((status) == (expected),                                             \
                          (stderr, "%s:%d: error status: %d ", __FILE__, __LINE__,            \
                           (int)(status)), status, err, label, __VA_ARGS__)

#define NVSHMEMI_NE_ERROR_JMP(status, expected, err, label, ...)                              \
    PSHMEMI_COMPAT_JMP_IF((status) != (expected),                                             \
                          (stderr, "%s:%d: non-zero status: %d ", __FILE__, __LINE__,         \
                           (int)(status)), status, err, label, __VA_ARGS__)

#define NVSHMEMI_NZ_ERROR_JMP(status, err, label, ...)                                        \
    NVSHMEMI_NE_ERROR_JMP(status, 0, err, label, __VA_ARGS__)

#define NVSHMEMI_CHECK_ERROR_JMP(statement, status, err, label, ...)                          \
    PSHMEMI_COMPAT_JMP_IF((statement), (stderr, "%s:%d: ", __FILE__, __LINE__), status, err,  \
                          label, __VA_ARGS__)

#define NVSHMEMI_NZ_EXIT(status, ...)                                                         \
    do {                                                                                      \
        const int pshmemi_status_ = (int)(status); /* evaluated once, errno read at once */   \
        const int pshmemi_errno_ = errno;                                                     \
        if (pshmemi_status_ != 0) {                                                           \
            fprintf(stderr, "%s:%d: non-zero status: %d: %s, exiting... ", __FILE__, __LINE__, \
                    pshmemi_status_, strerror(pshmemi_errno_));                               \
            PSHMEMI_COMPAT_TAIL(stderr, __VA_ARGS__);                                         \
            exit(-1);                                                                         \
        }                                                                                     \
    } while (0)

#define NVSHMEMI_NZ_SYSCHECK_EXIT(sys_status, ...)                                            \
    do {                                                                                      \
        const int pshmemi_sys_status_ = (int)(sys_status);                                    \
        if (pshmemi_sys_status_ != 0) {                                                       \
            fprintf(stderr, "%s:%d: non-zero status: %d: %s, exiting... ", __FILE__, __LINE__, \
                    pshmemi_sys_status_, strerror(pshmemi_sys_status_));                      \
            PSHMEMI_COMPAT_TAIL(stderr, __VA_ARGS__);                                         \
            exit(-1);                                                                         \
        }                                                                                     \
    } while (0)

#endif /* PSHMEM_COMPAT_NVSHMEMX_ERROR_H */
