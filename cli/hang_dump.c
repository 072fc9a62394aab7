/* cli/hang_dump.c — where is a hung moeplan? MP_HANG_DUMP_S=N: after N seconds, and twice more a
 * second apart, the main thread prints its stack on stderr ("== main thread stack (MP_HANG_DUMP_S)",
 * then one frame per line, object(+offset) for functions without an exported symbol: addr2line
 * -f -e OBJECT OFFSET names them). A thread inside a system call that does not return (a driver's
 * ioctl) takes no signal, so each time the watcher also prints what the kernel says of the main
 * thread: its state, wait channel, current system call and, where readable, its kernel stack.
 * For machines without gdb where ptrace is not an option (the GPU machine). Off
 * unless the variable is set (main reads it with the other knobs, base/knobs.h). */
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/hang_dump.h"

static pthread_t main_thread;

static void on_signal(int sig)
{
    (void)sig;
    static const char head[] = "== main thread stack (MP_HANG_DUMP_S)\n";
    void *pc[64];
    const int n = backtrace(pc, 64);
    if (write(2, head, sizeof head - 1) < 0)
        return;
    backtrace_symbols_fd(pc, n, 2);
}

static void write_all(const char *s, size_t n)
{
    while (n > 0) {
        const ssize_t k = write(2, s, n);
        if (k <= 0)
            return;
        s += k;
        n -= (size_t)k;
    }
}

/* /proc/self/task/<main>/FILE on stderr, prefixed with its name; nothing when unreadable. Without
 * malloc (stdio's buffers, this thread's first malloc arena): the hang this is for may be a main
 * thread that holds the address space's lock inside the kernel, and a new mapping would then wait
 * behind it (seen 2026-11-29: cudaHostRegister of a file mapping, docs/runtime.md). */
static void print_task_file(const char *file)
{
    char path[64], head[64], buf[4096];
    snprintf(path, sizeof path, "/proc/self/task/%d/%s", (int)getpid(), file);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n < 0)
        n = 0;
    const int h = snprintf(head, sizeof head, "== main thread %s: ", file);
    write_all(head, (size_t)h);
    write_all(buf, (size_t)n);
    if (n == 0 || buf[n - 1] != '\n')
        write_all("\n", 1);
}

static void *watch(void *arg)
{
    const unsigned s = (unsigned)(uintptr_t)arg;
    sleep(s);
    for (int i = 0; i < 3; i++) {
        pthread_kill(main_thread, SIGUSR2);
        usleep(200000); /* the handler's lines first (when the main thread can take a signal) */
        print_task_file("stat");
        print_task_file("wchan");
        print_task_file("syscall");
        print_task_file("stack");
        sleep(1);
    }
    return NULL;
}

bool mp_hang_dump_arm(unsigned seconds)
{
    void *warm[2];
    backtrace(warm, 2); /* loads the unwinder now: the handler must not load a library */
    main_thread = pthread_self();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    pthread_t t;
    if (sigaction(SIGUSR2, &sa, NULL) != 0 || pthread_create(&t, NULL, watch, (void *)(uintptr_t)seconds) != 0)
        return false;
    pthread_detach(t);
    return true;
}
