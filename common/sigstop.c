/* sigstop.c — the stop-request signal handlers (see sigstop.h). */
#include "common/sigstop.h"

#include <limits.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t flag;
static char line[256];
static volatile sig_atomic_t line_len;   /* 0 while line is rewritten */
/* the armed path: written only while armed is 0, read by a handler only while it is 1 */
static char armed_path[PATH_MAX];
static volatile sig_atomic_t armed;

const volatile sig_atomic_t *llm_sigstop_flag(void)
{
    return &flag;
}

static void unlink_armed(void)
{
    if (__atomic_load_n(&armed, __ATOMIC_ACQUIRE))
        unlink(armed_path);
}

static void on_request(int sig)
{
    /* a second SIGINT means "now": what is being written appears only by rename once
     * complete, so nothing complete is touched by this */
    if (sig == SIGINT && flag) {
        unlink_armed();
        _exit(130);
    }
    flag = sig;
}

static void on_exit_now(int sig)
{
    (void)sig;
    unlink_armed();
    size_t len = (size_t)line_len;
    if (len) {
        ssize_t n = write(2, line, len);
        (void)n;
    }
    _exit(0);
}

static const int sigs[3] = {SIGTERM, SIGINT, SIGUSR1};
/* the dispositions before the first catch (inherited: a background job ignores SIGINT) */
static struct sigaction before[3];
static int saved;

static void catch_with(void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], &sa, saved ? NULL : &before[i]);
    saved = 1;
}

void llm_sigstop_catch(void)
{
    catch_with(on_request);
}

void llm_sigstop_catch_exit(const char *msg)
{
    /* a handler running meanwhile (a second call: -q after the options) writes nothing */
    line_len = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    size_t n = msg ? strlen(msg) : 0;
    if (n >= sizeof line)
        n = sizeof line - 1;
    if (n)
        memcpy(line, msg, n);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    line_len = (sig_atomic_t)n;
    catch_with(on_exit_now);
}

void llm_sigstop_restore(void)
{
    for (int i = 0; saved && i < 3; i++)
        sigaction(sigs[i], &before[i], NULL);
}

int llm_sigstop_unlink_on_exit(const char *path)
{
    __atomic_store_n(&armed, 0, __ATOMIC_RELEASE);
    if (!path)
        return 0;
    size_t n = strlen(path);
    if (n >= sizeof armed_path)
        return -1;
    memcpy(armed_path, path, n + 1);
    __atomic_store_n(&armed, 1, __ATOMIC_RELEASE);
    return 0;
}
