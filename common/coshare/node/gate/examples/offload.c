/* A C client of the coshare offload gate: hold device threads around an offload.
 *
 *   cc -O2 -o offload offload.c && ./offload 60
 *
 * Speaks the line protocol of coshare.node.gate.protocol over the unix socket named by
 * $COSHARE_GATE_SOCKET (job-exec sets it; default /run/coshare/gate.sock). The gate knows
 * the caller's job from the kernel, so the requests carry no identity. Fortran codes can
 * bind these two functions with ISO_C_BINDING.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Send one request line, read one reply line into reply (without the newline). */
static int gate_call(int fd, const char *request, char *reply, size_t size) {
    size_t len = strlen(request), got = 0;
    if (write(fd, request, len) != (ssize_t)len) return -1;
    while (got + 1 < size) {
        ssize_t n = read(fd, reply + got, 1);
        if (n <= 0) return -1;
        if (reply[got] == '\n') break;
        got++;
    }
    reply[got] = '\0';
    return strncmp(reply, "OK", 2) == 0 ? 0 : -1;
}

static int gate_connect(void) {
    const char *path = getenv("COSHARE_GATE_SOCKET");
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    strncpy(addr.sun_path, path ? path : "/run/coshare/gate.sock", sizeof addr.sun_path - 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) return -1;
    return fd;
}

int main(int argc, char **argv) {
    char request[64], reply[256];
    long grant;
    int fd = gate_connect();
    if (fd < 0) { perror("gate"); return 2; }
    /* ACQUIRE waits until the threads fit; the device may be left out for one-device jobs. */
    snprintf(request, sizeof request, "ACQUIRE %s\n", argc > 1 ? argv[1] : "1");
    if (gate_call(fd, request, reply, sizeof reply) != 0) { fprintf(stderr, "%s\n", reply); return 1; }
    grant = strtol(reply + 3, NULL, 10);          /* "OK <grant> <device> <threads>" */
    printf("granted: %s\n", reply);
    /* ... the offload runs here ... */
    snprintf(request, sizeof request, "RELEASE %ld\n", grant);
    if (gate_call(fd, request, reply, sizeof reply) != 0) { fprintf(stderr, "%s\n", reply); return 1; }
    printf("released\n");
    close(fd);  /* closing (or dying) also returns every grant still held */
    return 0;
}
