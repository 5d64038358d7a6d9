/* graphrun CLI: output files under a directory the user names (`run --out`,
 * `ckpt export`): tensor names become paths, never outside that directory. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_util.h"
#include "commands.h"

int cli_out_path(const char *cmd, const char *dir, const char *name, const char *ext, char **path) {
  *path = NULL;
  bool safe = name[0] && name[0] != '/';
  for (const char *p = name; safe && *p;) {
    size_t c = strcspn(p, "/");
    if (c == 0 || (c == 1 && p[0] == '.') || (c == 2 && p[0] == '.' && p[1] == '.')) safe = false;
    p += c + (p[c] == '/');
  }
  if (!safe) {
    fprintf(stderr, "graphrun %s: tensor name '%s' is not a safe file path; skipped\n", cmd, name);
    return GR_EXIT_FAILURE;
  }
  size_t len = strlen(dir) + strlen(name) + strlen(ext) + 2;
  char *s = malloc(len);
  if (!s) {
    fprintf(stderr, "graphrun %s: out of memory\n", cmd);
    return GR_EXIT_FAILURE;
  }
  snprintf(s, len, "%s/%s%s", dir, name, ext);
  for (char *p = s + strlen(dir) + 1; (p = strchr(p, '/')); p++) {
    *p = '\0';
    if (mkdir(s, 0755) != 0 && errno != EEXIST) {
      fprintf(stderr, "graphrun %s: cannot create directory '%s': %s\n", cmd, s, strerror(errno));
      free(s);
      return GR_EXIT_FAILURE;
    }
    *p = '/';
  }
  *path = s;
  return GR_EXIT_OK;
}
