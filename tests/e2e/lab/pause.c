// The lab's pod sandbox process (containerd's sandbox_image): holds the pod's namespaces open
// until it is told to stop. PID 1 of its pid namespace, so it also reaps orphaned children.
// Built statically by tests/e2e/lab.sh into the image docker.io/vgpu-lab/pause:e2e, because the
// lab has no registry to pull the usual one from.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int signo) {
  (void)signo;
  _exit(0);
}

static void on_child(int signo) {
  (void)signo;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("vgpu-lab pause");
    return 0;
  }
  struct sigaction stop = {0};
  stop.sa_handler = on_stop;
  if (sigaction(SIGINT, &stop, NULL) != 0 || sigaction(SIGTERM, &stop, NULL) != 0) return 1;
  struct sigaction child = {0};
  child.sa_handler = on_child;
  child.sa_flags = SA_NOCLDSTOP;
  if (sigaction(SIGCHLD, &child, NULL) != 0) return 2;
  for (;;) pause();
}
