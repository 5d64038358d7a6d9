/* The writer lock of a checkpoint (gr_ckpt_options.lock): one writer at a
 * time. An flock(2) on a lock file beside the checkpoint (PATH.lock; in a
 * sharded directory DIR/writer.lock), so the kernel drops it when its
 * holder dies, however it dies; the file holds the holder's host and pid
 * for the message a second writer gets. A file left by a killed holder is
 * not locked and is taken over. The holder removes the file when it
 * closes; a writer that locked a file just removed (its inode is no longer
 * the path's) opens the path again. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoints/ckpt_internal.h"

/* What the holder wrote ("host H pid P"), waiting briefly for a holder that
 * has just locked and not written yet. */
static void read_holder(int fd, char *buf, size_t cap) {
  for (int tries = 0; tries < 20; tries++) {
    ssize_t n = pread(fd, buf, cap - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    if (n > 0) return;
    struct timespec ts = {0, 5 * 1000000L};
    nanosleep(&ts, NULL);
  }
  snprintf(buf, cap, "a process that has not written its name yet");
}

gr_status ckpt_lock(gr_ckpt *ck, gr_error *err) {
  char path[4096];
  if ((size_t)snprintf(path, sizeof path, "%s%s", ck->path,
                       ck->sharded ? "/writer.lock" : ".lock") >= sizeof path)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "checkpoint path is too long");
  for (int attempt = 0; attempt < 100; attempt++) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      return gr_error_set(err, GR_ERR_IO, "checkpoint '%s': cannot open its lock file %s: %s",
                          ck->path, path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int e = errno;
      char holder[256];
      if (e == EWOULDBLOCK) read_holder(fd, holder, sizeof holder);
      close(fd);
      if (e == EWOULDBLOCK)
        return gr_error_set(err, GR_ERR_UNAVAILABLE,
                            "checkpoint '%s' has another writer: %s holds its lock (%s); one "
                            "writer at a time: stop it, or give another checkpoint path",
                            ck->path, holder, path);
      return gr_error_set(err, GR_ERR_IO, "checkpoint '%s': cannot lock %s: %s", ck->path, path,
                          strerror(e));
    }
    struct stat held, now;
    if (fstat(fd, &held) == 0 && stat(path, &now) == 0 && held.st_ino == now.st_ino &&
        held.st_dev == now.st_dev) {
      char host[256] = "?", me[320];
      gethostname(host, sizeof host - 1);
      host[sizeof host - 1] = '\0';
      int n = snprintf(me, sizeof me, "host %s pid %ld\n", host, (long)getpid());
      if (ftruncate(fd, 0) != 0 || pwrite(fd, me, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return gr_error_set(err, GR_ERR_IO, "checkpoint '%s': cannot write its lock file %s: %s",
                            ck->path, path, strerror(e));
      }
      if (!(ck->lock_path = strdup(path))) {
        close(fd);
        return gr_error_set_oom(err);
      }
      ck->lock_fd = fd;
      return GR_OK;
    }
    close(fd); /* its holder removed it between our open and our lock: again */
  }
  return gr_error_set(err, GR_ERR_IO, "checkpoint '%s': its lock file %s keeps changing", ck->path,
                      path);
}

void ckpt_unlock(gr_ckpt *ck) {
  if (!ck->lock_path) return;
  unlink(ck->lock_path); /* while still locked: a writer waiting on this inode opens again */
  close(ck->lock_fd);
  free(ck->lock_path);
  ck->lock_path = NULL;
}
