/*
 * The lean baseline of benches/speed.sh: the shape of a rehearsal with no
 * process in it that the shape does not need.
 *
 *   lean bwrap   WORKSPACE CMD   overlay + bubblewrap --unshare-all + walk
 *   lean unshare WORKSPACE CMD   overlay + user/net/mount namespaces + walk
 *
 * One process sets up a private mount namespace (and, when not root, a user
 * namespace mapping the caller to 0), mounts a tmpfs, an overlay of the
 * workspace on it (upper layer on the tmpfs), then forks: the child runs
 * `bwrap --unshare-all ... bash -c CMD` in the overlay (`bwrap`) or
 * `bash -c CMD` directly in new user, network and mount namespaces
 * (`unshare`); the parent waits and walks the upper layer (what a
 * change list needs: every entry's type and name). As root, the command
 * runs as the workspace's owner, as dryrun's does. No mktemp, stat, chown
 * or setpriv processes: everything is a system call of this one program.
 *
 * Build: cc -O2 -o lean benches/lean/lean.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "lean: %s: %s\n", what, strerror(errno));
    exit(125);
}

static void write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        die(path);
    close(fd);
}

/* In a new user namespace: `uid`:`gid` outside is 0:0 inside. */
static void map_to_root(uid_t uid, gid_t gid)
{
    char map[64];
    write_file("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "0 %u 1", uid);
    write_file("/proc/self/uid_map", map);
    snprintf(map, sizeof map, "0 %u 1", gid);
    write_file("/proc/self/gid_map", map);
}

static long entries;

static int count(const char *path, const struct stat *st, int type, struct FTW *f)
{
    (void)path, (void)st, (void)type, (void)f;
    entries++;
    return 0;
}

/* The base directory: a tmpfs mounted over /tmp in this private mount
 * namespace (the host's /tmp is untouched). */
#define BASE "/tmp"

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[1], "bwrap") && strcmp(argv[1], "unshare"))) {
        fprintf(stderr, "usage: lean bwrap|unshare WORKSPACE CMD\n");
        return 2;
    }
    int use_bwrap = !strcmp(argv[1], "bwrap");
    const char *ws = argv[2], *cmd = argv[3];
    struct stat wst;
    if (stat(ws, &wst))
        die(ws);
    uid_t uid = getuid();
    gid_t gid = getgid();
    int root = uid == 0;

    if (root) {
        if (unshare(CLONE_NEWNS))
            die("unshare");
    } else {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS))
            die("unshare");
        map_to_root(uid, gid);
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
        die("make / private");
    if (mount("lean", BASE, "tmpfs", 0, "size=1g"))
        die("tmpfs");
    if (mkdir(BASE "/u", 0755) || mkdir(BASE "/w", 0755) || mkdir(BASE "/m", 0755))
        die("mkdir");
    if (root && chown(BASE "/u", wst.st_uid, wst.st_gid))
        die("chown upper");
    char opts[4096];
    snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=" BASE "/u,workdir=" BASE "/w", ws);
    /* bwrap binds the overlay onto the workspace's path; the unshare shape
     * mounts it there directly. */
    const char *target = use_bwrap ? BASE "/m" : ws;
    if (mount("overlay", target, "overlay", 0, opts))
        die("overlay");

    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        if (root) {
            if (setgroups(0, NULL) || setresgid(wst.st_gid, wst.st_gid, wst.st_gid) ||
                setresuid(wst.st_uid, wst.st_uid, wst.st_uid))
                die("drop to the workspace's owner");
            /* Changing ids made us undumpable: our /proc files would be
             * root's, and the user namespace's maps unwritable. */
            if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0))
                die("dumpable");
        }
        if (use_bwrap) {
            const char *args[64];
            int n = 0;
            args[n++] = "bwrap";
            args[n++] = "--unshare-all";
            args[n++] = "--die-with-parent";
            args[n++] = "--new-session";
            args[n++] = "--ro-bind"; args[n++] = "/usr"; args[n++] = "/usr";
            args[n++] = "--ro-bind"; args[n++] = "/etc"; args[n++] = "/etc";
            args[n++] = "--dev"; args[n++] = "/dev";
            args[n++] = "--proc"; args[n++] = "/proc";
            args[n++] = "--tmpfs"; args[n++] = "/tmp";
            args[n++] = "--bind"; args[n++] = BASE "/m"; args[n++] = ws;
            args[n++] = "--chdir"; args[n++] = ws;
            static char links[4][2][64];
            const char *names[4] = {"bin", "sbin", "lib", "lib64"};
            for (int i = 0; i < 4; i++) {
                char path[16], dest[64];
                snprintf(path, sizeof path, "/%s", names[i]);
                ssize_t l = readlink(path, dest, sizeof dest - 1);
                if (l > 0) {
                    dest[l] = 0;
                    snprintf(links[i][0], 64, "%s", dest);
                    snprintf(links[i][1], 64, "%s", path);
                    args[n++] = "--symlink"; args[n++] = links[i][0]; args[n++] = links[i][1];
                } else if (access(path, F_OK) == 0) {
                    snprintf(links[i][1], 64, "%s", path);
                    args[n++] = "--ro-bind"; args[n++] = links[i][1]; args[n++] = links[i][1];
                }
            }
            args[n++] = "bash"; args[n++] = "-c"; args[n++] = cmd;
            args[n] = NULL;
            execvp("bwrap", (char *const *)args);
            die("exec bwrap");
        } else {
            /* Root drops to the owner above, so it needs a user namespace
             * of its own for the network namespace, as `unshare -Urn`. */
            if (root) {
                if (unshare(CLONE_NEWUSER))
                    die("unshare user");
                map_to_root(wst.st_uid, wst.st_gid);
            }
            if (unshare(CLONE_NEWNET))
                die("unshare net");
            if (chdir(ws))
                die("chdir");
            execl("/bin/bash", "bash", "-c", cmd, (char *)NULL);
            die("exec bash");
        }
    }
    int status;
    if (waitpid(pid, &status, 0) < 0)
        die("wait");
    if (nftw(BASE "/u", count, 32, FTW_PHYS))
        die("walk");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
