/* Signal dispositions that libfabric's dependencies take over behind our back.
 *
 * Debian's libfabric links the PSM providers, whose libinfinipath installs handlers for
 * SIGTERM, SIGINT, SIGSEGV, SIGBUS, SIGILL and SIGABRT from its load-time constructor, in
 * every process that links libfabric, whether or not PSM is ever used. Its SIGTERM handler
 * calls exit(): run while libfabric (or malloc) holds a lock, exit's destructors wait on that
 * lock forever, and a rank told to stop hangs until the launcher's SIGKILL. The same
 * constructor also spends about 200 ms measuring the CPU clock, so the window is wide: a
 * SIGTERM sent in it becomes exit(1).
 *
 * So every handler that lives in a PSM library is put back to the default: at load (the
 * constructor below runs after those of our dependencies) and again whenever the transport
 * opens. Handlers installed by anyone else (the application, Python, PyTorch) are left alone.
 * An executable can also close the load-time window: its .preinit_array (run before any
 * library initialiser) calls pshmem_fabric_hold_termination, which blocks the termination
 * signals; the constructor resets the handlers and then unblocks them, so that a SIGTERM sent
 * during the load is delivered with its default action (see hold_signals_through_load!). */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <string.h>

static const int taken_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGSEGV,
                                    SIGBUS,  SIGILL, SIGABRT, SIGFPE};

/* Whether the code at `fn` belongs to a PSM library (libinfinipath, libpsm_infinipath,
 * libpsm2, libpsm3). */
static int in_psm_library(void *fn) {
    Dl_info info;
    if (fn == NULL || dladdr(fn, &info) == 0 || info.dli_fname == NULL)
        return 0;
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    return strncmp(base, "libinfinipath", 13) == 0 || strncmp(base, "libpsm", 6) == 0;
}

/* Resets to SIG_DFL every signal in `taken_signals` whose handler lives in a PSM library.
 * Returns how many were reset. Safe to call any number of times. */
int pshmem_fabric_reset_provider_signals(void) {
    int reset = 0;
    for (unsigned i = 0; i < sizeof taken_signals / sizeof taken_signals[0]; i++) {
        struct sigaction now;
        if (sigaction(taken_signals[i], NULL, &now) != 0)
            continue;
        void *fn = (now.sa_flags & SA_SIGINFO) ? (void *)now.sa_sigaction
                                                 : (void *)now.sa_handler;
        if (fn == (void *)SIG_DFL || fn == (void *)SIG_IGN || !in_psm_library(fn))
            continue;
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        if (sigaction(taken_signals[i], &dfl, NULL) == 0)
            reset++;
    }
    return reset;
}

static const int held_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
static sigset_t mask_before_hold;
static int holding;

/* Blocks the termination signals until the constructor below has reset the PSM handlers.
 * Meant for an executable's .preinit_array: called once, before any library initialiser,
 * while the process has one thread. */
void pshmem_fabric_hold_termination(void) {
    sigset_t hold;
    sigemptyset(&hold);
    for (unsigned i = 0; i < sizeof held_signals / sizeof held_signals[0]; i++)
        sigaddset(&hold, held_signals[i]);
    if (sigprocmask(SIG_BLOCK, &hold, &mask_before_hold) == 0)
        holding = 1;
}

__attribute__((constructor)) static void pshmem_fabric_reset_at_load(void) {
    (void)pshmem_fabric_reset_provider_signals();
    if (holding) {
        holding = 0;
        /* A signal that arrived during the load is delivered here, with its default action. */
        (void)sigprocmask(SIG_SETMASK, &mask_before_hold, NULL);
    }
}
