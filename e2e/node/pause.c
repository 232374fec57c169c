/* The pod sandbox's process: holds the pod's namespaces, reaps orphans, exits on SIGINT or
 * SIGTERM; with -v, as Kubernetes' own pause, it prints its version and exits (a container that
 * exits at once: a crash loop). No image can be pulled on the test bed, so this is built here
 * (gcc -static). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("pause (compositor test bed)");
    return 0;
  }
  struct sigaction on_quit = {.sa_handler = quit};
  struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &on_quit, NULL) < 0 || sigaction(SIGTERM, &on_quit, NULL) < 0 ||
      sigaction(SIGCHLD, &on_child, NULL) < 0)
    return 1;
  for (;;) pause();
}
