/* Stop and termination signals (see job_signals.h).
 *
 * What a handler touches is limited to what C11 and POSIX allow there:
 * sig_atomic_t flags and lock-free atomics (the times, which need 64 bits),
 * clock_gettime, sigaction, raise, and the async-signal-safe exit report
 * writer for the second signal. */
#include "core/job_signals.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/exit_report.h"

/* The same signal again within this long is the same warning delivered
 * twice (by mpirun and by the scheduler, or to a process group), not a
 * second request. */
#define DUPLICATE_NS 1000000000ll

static volatile sig_atomic_t g_stop_seen;  /* either signal arrived */
static volatile sig_atomic_t g_first;      /* the first signal's number */
static atomic_llong g_first_ns;            /* when it arrived (zs__clock_ns) */
static atomic_llong g_term_ns;             /* when SIGTERM arrived (or the grace restarted); 0: never */
static atomic_llong g_grace_ns = 10000000000ll;

/* The alarm: SIGCONT and SIGTERM post it (sem_post is async-signal-safe),
 * the peer watch waits on it. Initialized once per process, never
 * destroyed: a handler may post it at any time. */
static sem_t g_alarm;
static atomic_int g_alarm_ready;
static atomic_int g_alarm_signal; /* the signal that last posted it (a lock-free atomic: the
                                     watch's thread reads it) */

/* Installation: only ever touched by zs_create / zs_destroy. */
static int g_users;
static int g_installed;
static int g_stop_signal;
static struct sigaction g_old_stop, g_old_term, g_old_cont;

const char *zs__signals_name(int signal_number) {
    switch (signal_number) {
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGTERM: return "SIGTERM";
    case SIGCONT: return "SIGCONT";
    }
    return "";
}

/* strcat with a bound, for the handler (no snprintf there). */
static void append(char *out, size_t cap, const char *s) {
    size_t n = strlen(out);
    while (*s && n + 1 < cap) out[n++] = *s++;
    out[n] = '\0';
}

/* The second signal: the report, then the signal's own default action
 * (raised now, delivered when this handler returns: the process ends by
 * that signal, as it would have without the runtime's handler). */
static void end_now(int sig) {
    /* On this stack: another thread may be in this handler for the other
     * signal at the same time. */
    char message[256];
    message[0] = '\0';
    append(message, sizeof message, "a second signal (");
    append(message, sizeof message, zs__signals_name(sig));
    append(message, sizeof message, ") after ");
    append(message, sizeof message, zs__signals_name(g_first));
    append(message, sizeof message, " ended the process at once, without a checkpoint");
    const zs__exit_report report = {ZS_EXIT_CAUSE_TERMINATED, ZS_TERMINATED_EXIT_CODE, -1, "",
                                    message};
    (void)zs__exit_report_write(&report, NULL, 0);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

static void post_alarm(int sig) {
    const int saved = errno;
    atomic_store(&g_alarm_signal, sig);
    if (atomic_load(&g_alarm_ready)) sem_post(&g_alarm);
    errno = saved;
}

/* SIGCONT: the first step of mpirun's (and slurmstepd's) tear-down, sent
 * to every rank at once, a second before SIGTERM. Not a stop: only the
 * alarm, so that a rank whose peer died learns it now. The process has
 * already been continued by the kernel when this runs. */
static void on_continue(int sig) { post_alarm(sig); }

static void on_signal(int sig) {
    const long long now = (long long)zs__clock_ns();
    if (sig == SIGTERM) post_alarm(sig);
    if (g_stop_seen) {
        if (sig == g_first && now - atomic_load(&g_first_ns) < DUPLICATE_NS) return;
        end_now(sig);
        return;
    }
    g_first = sig;
    atomic_store(&g_first_ns, now);
    if (sig == SIGTERM) atomic_store(&g_term_ns, now);
    g_stop_seen = 1;
}

zs_status zs__signals_install(int stop_signal, double term_grace_s) {
    atomic_store(&g_grace_ns, (long long)(term_grace_s * 1e9));
    if (g_users++ > 0) return ZS_OK;
    g_stop_seen = 0;
    g_first = 0;
    atomic_store(&g_term_ns, 0);
    g_installed = 0;
    g_stop_signal = stop_signal;
    if (stop_signal == 0) return ZS_OK;
    if (!atomic_load(&g_alarm_ready)) {
        if (sem_init(&g_alarm, 0, 0) != 0) {
            g_users--;
            return zs__fail(ZS_ERR_INTERNAL, "zs_create: cannot create the semaphore of the "
                            "signal handlers (%s)", strerror(errno));
        }
        atomic_store(&g_alarm_ready, 1);
    }
    while (sem_trywait(&g_alarm) == 0) {} /* posts of an earlier context's life */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    /* SA_RESTART: a read or write of the program's interrupted by the
     * warning goes on; the runtime acts at its next step. Both signals are
     * blocked while the handler runs, so two arriving together are counted
     * one after the other. */
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, stop_signal);
    sigaddset(&sa.sa_mask, SIGTERM);
    if (sigaction(stop_signal, &sa, &g_old_stop) != 0) {
        g_users--;
        return zs__fail(ZS_ERR_INTERNAL, "zs_create: cannot install the handler of %s "
                        "(job.stop_signal)", zs__signals_name(stop_signal));
    }
    if (sigaction(SIGTERM, &sa, &g_old_term) != 0) {
        sigaction(stop_signal, &g_old_stop, NULL);
        g_users--;
        return zs__fail(ZS_ERR_INTERNAL, "zs_create: cannot install the handler of SIGTERM");
    }
    struct sigaction cont;
    memset(&cont, 0, sizeof cont);
    cont.sa_handler = on_continue;
    cont.sa_flags = SA_RESTART;
    sigemptyset(&cont.sa_mask);
    if (sigaction(SIGCONT, &cont, &g_old_cont) != 0) {
        sigaction(stop_signal, &g_old_stop, NULL);
        sigaction(SIGTERM, &g_old_term, NULL);
        g_users--;
        return zs__fail(ZS_ERR_INTERNAL, "zs_create: cannot install the handler of SIGCONT");
    }
    g_installed = 1;
    return ZS_OK;
}

void zs__signals_restore(void) {
    if (g_users <= 0 || --g_users > 0) return;
    if (!g_installed) return;
    sigaction(g_stop_signal, &g_old_stop, NULL);
    sigaction(SIGTERM, &g_old_term, NULL);
    sigaction(SIGCONT, &g_old_cont, NULL);
    g_installed = 0;
}

int zs__signals_alarm_wait(double timeout_s) {
    if (!atomic_load(&g_alarm_ready)) return -1;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    const long long ns = (long long)until.tv_nsec + (long long)(timeout_s * 1e9);
    until.tv_sec += (time_t)(ns / 1000000000ll);
    until.tv_nsec = (long)(ns % 1000000000ll);
    while (sem_timedwait(&g_alarm, &until) != 0)
        if (errno != EINTR) return 0;
    return 1;
}

void zs__signals_alarm_wake(void) {
    if (atomic_load(&g_alarm_ready)) sem_post(&g_alarm);
}

int zs__signals_alarm_signal(void) { return atomic_load(&g_alarm_signal); }

int zs__signals_stop_seen(void) { return g_stop_seen != 0; }
int zs__signals_first(void) { return g_first; }
double zs__signals_term_grace(void) { return 1e-9 * (double)atomic_load(&g_grace_ns); }

int zs__signals_term_expired(void) {
    const long long since = atomic_load(&g_term_ns);
    return since != 0 && (long long)zs__clock_ns() - since > atomic_load(&g_grace_ns);
}

void zs__signals_term_regrace(void) {
    if (atomic_load(&g_term_ns) != 0) atomic_store(&g_term_ns, (long long)zs__clock_ns());
}

void zs__signals_terminate(void) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGTERM, &dfl, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    raise(SIGTERM);
}
