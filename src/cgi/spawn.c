/* SPDX-License-Identifier: BSD-2-Clause */
/* The CGI origin's spawner: finding the script and starting it on the spawner threads. */
#include "internal.h"

/* ---------------------------------------------------------------- finding the script */

struct script {
    char rel[MAX_PATH];  /* the script, relative to the directory */
    size_t rel_len;
    const char *path_info; /* into rel's copy below: "" or "/..." */
    char info[MAX_PATH];
};

/* Walks rel (a normalised relative path) from the directory: the first regular file is
 * the script, the rest is PATH_INFO. Returns 0 or the status to answer. */
static int find_script(struct cgi_origin *o, const char *rel, size_t rel_len, bool trailing,
                       struct script *sc)
{
    if (rel_len == 0)
        return 403;
    memcpy(sc->rel, rel, rel_len + 1);
    size_t i = 0;
    for (;;) {
        while (i < rel_len && sc->rel[i] != '/')
            i++;
        char save = sc->rel[i];
        sc->rel[i] = '\0';
        int fd = um_static_open_beneath(o->root_fd, sc->rel, O_PATH);
        if (fd < 0)
            return um_static_errno_status(errno);
        struct stat st;
        int r = fstat(fd, &st);
        close(fd);
        if (r != 0)
            return 500;
        if (S_ISREG(st.st_mode)) {
            if (!(st.st_mode & (S_IXUSR | S_IXGRP | S_IXOTH)))
                return 403;
            sc->rel_len = i;
            size_t n = 0;
            if (i < rel_len) {
                sc->info[0] = '/';
                n = rel_len - i - 1 + 1;
                memcpy(sc->info + 1, rel + i + 1, rel_len - i - 1);
            }
            if (trailing && n + 1 < sizeof(sc->info) && i < rel_len)
                sc->info[n++] = '/';
            sc->info[n] = '\0';
            sc->path_info = sc->info;
            return 0;
        }
        if (!S_ISDIR(st.st_mode))
            return 403;
        sc->rel[i] = save;
        if (i >= rel_len)
            return 403; /* a directory: no listing, no index */
        i++;
    }
}

/* ---------------------------------------------------------------- spawning */

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* The spawners. posix_spawn holds its caller from the clone to the exec, which on a busy
 * machine is a millisecond or more (the new process waits for a CPU, then loads its
 * interpreter); a worker would serve nobody meanwhile. So the workers queue the spawn to a
 * few threads of the process, started on first use and living as long as it, that do
 * nothing else, and go on: the script's pipes are in the worker's loop from the start (its
 * stdin takes the body into the pipe's buffer, its stdout is simply not readable yet), and
 * the result (the pid and a pidfd, or the error) comes back to the worker's loop with
 * um_loop_post. A child that the worker wanted killed before its pid was known is signalled
 * then. */
#define SPAWNERS 4

struct spawn_job {
    struct um_task done; /* posted to the worker's loop once the spawn is over */
    struct spawn_job *qnext;       /* the spawners' queue */
    struct spawn_job *next, *prev; /* the worker's jobs not done yet */
    struct worker_cgi *wc;
    struct cgi_child *child;
    char *script, *dir, **argv, **envp; /* the job's own copies */
    int child_fds[3];    /* stdin, stdout, stderr ends for the child; the spawner closes them */
    /* Results, written by the spawner before it posts done. */
    int err;             /* 0 or an errno value */
    pid_t pid;
    int pidfd;
    int finished;        /* under spawners.lock: done, and posted to the worker */
};

static struct {
    pthread_once_t once;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct spawn_job *head, *tail;
} spawners = {PTHREAD_ONCE_INIT, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL};

static char **strv_copy(char *const *v)
{
    size_t n = 0;
    while (v[n])
        n++;
    char **c = um_calloc(n + 1, sizeof(*c));
    for (size_t i = 0; i < n; i++)
        c[i] = um_strndup(v[i], strlen(v[i]));
    return c;
}

static void strv_free(char **v)
{
    if (v == NULL)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

static void run_job(struct spawn_job *j)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int e = posix_spawn_file_actions_init(&fa);
    if (e != 0)
        goto out;
    /* dup2 clears close-on-exec on 0, 1 and 2; every other descriptor is closed. */
    posix_spawn_file_actions_adddup2(&fa, j->child_fds[0], 0);
    posix_spawn_file_actions_adddup2(&fa, j->child_fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, j->child_fds[2], 2);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    posix_spawn_file_actions_addchdir_np(&fa, j->dir);
    if ((e = posix_spawnattr_init(&at)) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        goto out;
    }
    /* Handlers do not survive exec, but an ignored signal stays ignored: the server ignores
     * SIGPIPE, which a script must not inherit. */
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    sigaddset(&dfl, SIGCHLD);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_USEVFORK);
    pid_t pid;
    e = posix_spawn(&pid, j->script, &fa, &at, j->argv, j->envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (e != 0)
        goto out;
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        /* Cannot watch it: do not let it run unwatched. */
        e = errno;
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        goto out;
    }
    j->pid = pid;
    j->pidfd = pidfd;
out:
    j->err = e;
    for (int i = 0; i < 3; i++)
        close(j->child_fds[i]);
}

static void *spawner_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&spawners.lock);
        while (spawners.head == NULL)
            pthread_cond_wait(&spawners.cond, &spawners.lock);
        struct spawn_job *j = spawners.head;
        spawners.head = j->qnext;
        if (spawners.head == NULL)
            spawners.tail = NULL;
        pthread_mutex_unlock(&spawners.lock);
        run_job(j);
        /* Finished and posted in one hold of the lock: a stopping worker that sees the job
         * finished (under the lock) knows it is posted, takes it back and frees it; and
         * after the post, the job is the worker's (it may be freed at once). */
        pthread_mutex_lock(&spawners.lock);
        j->finished = 1;
        um_loop_post(j->wc->ctx->loop, &j->done);
        pthread_mutex_unlock(&spawners.lock);
    }
    return NULL;
}

static void start_spawners(void)
{
    /* The spawners take no signal: the server's signals belong to its main thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < SPAWNERS; i++) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&a, 256 << 10);
        UM_ASSERT(pthread_create(&t, &a, spawner_main, NULL) == 0);
        pthread_attr_destroy(&a);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* The worker's side of a finished job: the child gets its pid and pidfd (or, when the spawn
 * failed, counts as gone: the fetch sees its stdout end with nothing, a 502). */
static void job_done(struct spawn_job *j)
{
    struct worker_cgi *wc = j->wc;
    struct cgi_child *c = j->child;
    if (j->prev)
        j->prev->next = j->next;
    else
        wc->jobs = j->next;
    if (j->next)
        j->next->prev = j->prev;
    c->spawning = false;
    if (j->err != 0) {
        um_log_err("cgi: %s: cannot run %s: %s", c->fetch ? c->fetch->tag : "-", j->script,
                   strerror(j->err));
        c->reaped = true; /* there is no process */
    } else {
        c->pid = j->pid;
        UM_ASSERT(um_loop_io_set(wc->ctx->loop, &c->pidio, j->pidfd, EPOLLIN) == UM_OK);
        /* What was decided while the pid was not known yet. */
        if (c->kill_stage == 2)
            um__cgi_child_signal(c, SIGKILL);
        else if (c->kill_stage == 1)
            um__cgi_child_signal(c, SIGTERM);
    }
    free(j->script);
    free(j->dir);
    strv_free(j->argv);
    strv_free(j->envp);
    free(j);
    um__cgi_child_maybe_free(c);
}

static void on_job_done(struct um_task *t)
{
    job_done(um_container_of(t, struct spawn_job, done));
}

/* At a worker's end: waits for its jobs still with the spawners, and takes them. */
void um__cgi_drain_jobs(struct worker_cgi *wc)
{
    while (wc->jobs) {
        struct spawn_job *j = wc->jobs;
        for (;;) {
            pthread_mutex_lock(&spawners.lock);
            int finished = j->finished;
            pthread_mutex_unlock(&spawners.lock);
            if (finished)
                break;
            usleep(1000); /* a spawn takes about a millisecond */
        }
        um_loop_unpost(wc->ctx->loop, &j->done);
        job_done(j);
    }
}

/* Starts script (absolute) in dir with argv and f's environment: the pipes go into the
 * loop, the spawn to a spawner. Returns 0 or an errno value (then nothing started). */
int um__cgi_spawn(struct cgi_fetch *f, const char *script, const char *dir, char *const argv[])
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
        int e = errno;
        int fds[] = {in[0], in[1], out[0], out[1], err[0], err[1]};
        for (size_t i = 0; i < UM_NELEMS(fds); i++)
            if (fds[i] >= 0)
                close(fds[i]);
        return e;
    }
    pthread_once(&spawners.once, start_spawners);
    struct worker_cgi *wc = f->wc;
    struct um_loop *loop = wc->ctx->loop;
    struct cgi_child *c = um_calloc(1, sizeof(*c));
    c->wc = wc;
    c->fetch = f;
    c->spawning = true;
    c->pidio.cb = um__cgi_on_child_exit;
    c->pidio.fd = -1;
    c->timer.cb = um__cgi_on_child_timer;
    c->free_task.cb = um__cgi_child_free_task;
    c->next = wc->children;
    if (c->next)
        c->next->prev = c;
    wc->children = c;
    um_loop_timer_start(loop, &c->timer, f->o->timeout_ms);
    f->child = c;

    set_nonblock(in[1]);
    set_nonblock(out[0]);
    set_nonblock(err[0]);
    f->outio.cb = um__cgi_on_stdout;
    f->inio.cb = um__cgi_on_stdin;
    f->errio.cb = um__cgi_on_stderr;
    UM_ASSERT(um_loop_io_set(loop, &f->outio, out[0], EPOLLIN) == UM_OK);
    UM_ASSERT(um_loop_io_set(loop, &f->errio, err[0], EPOLLIN) == UM_OK);
    f->inio.fd = in[1];

    struct spawn_job *j = um_calloc(1, sizeof(*j));
    j->done.cb = on_job_done;
    j->wc = wc;
    j->child = c;
    j->script = um_strndup(script, strlen(script));
    j->dir = um_strndup(dir, strlen(dir));
    j->argv = strv_copy(argv);
    j->envp = strv_copy(f->env.v);
    j->child_fds[0] = in[0];
    j->child_fds[1] = out[1];
    j->child_fds[2] = err[1];
    j->pidfd = -1;
    j->next = wc->jobs;
    if (j->next)
        j->next->prev = j;
    wc->jobs = j;
    pthread_mutex_lock(&spawners.lock);
    j->qnext = NULL;
    if (spawners.tail)
        spawners.tail->qnext = j;
    else
        spawners.head = j;
    spawners.tail = j;
    pthread_cond_signal(&spawners.cond);
    pthread_mutex_unlock(&spawners.lock);
    return 0;
}

/* Finds and starts the script for path (below the route's prefix, still encoded) and
 * query, with f->env holding the request's variables. Returns 0 or the status to answer
 * with. Used for the request and for a local redirect (then as a GET without body). */
int um__cgi_start_script(struct cgi_fetch *f, um_str path, um_str query)
{
    struct cgi_origin *o = f->o;
    char rel[MAX_PATH];
    size_t rel_len;
    unsigned flags;
    if (um_path_normalize(path, rel, sizeof(rel) - 1, &rel_len, &flags) != UM_OK)
        return 400;
    bool trailing = path.len > 0 && path.base[path.len - 1] == '/';
    struct script *sc = um_malloc(sizeof(*sc));
    int status = find_script(o, rel, rel_len, trailing, sc);
    if (status != 0) {
        free(sc);
        return status;
    }
    char *abs = um_malloc(strlen(o->root) + 1 + sc->rel_len + 1);
    size_t rlen = strlen(o->root);
    memcpy(abs, o->root, rlen);
    abs[rlen] = '/';
    memcpy(abs + rlen + 1, sc->rel, sc->rel_len);
    abs[rlen + 1 + sc->rel_len] = '\0';
    const char *base = strrchr(abs, '/') + 1;
    f->nph = strncmp(base, "nph-", 4) == 0;

    /* The variables that depend on the script. */
    char *sn = um_malloc(o->script_base_len + 1 + sc->rel_len + 1);
    memcpy(sn, o->route_path, o->script_base_len);
    sn[o->script_base_len] = '/';
    memcpy(sn + o->script_base_len + 1, sc->rel, sc->rel_len);
    size_t snlen = o->script_base_len + 1 + sc->rel_len;
    um__cgi_env_set(&f->env, "SCRIPT_NAME", sn, snlen);
    um__cgi_env_set(&f->env, "SCRIPT_FILENAME", abs, strlen(abs));
    um__cgi_env_set(&f->env, "PATH_INFO", sc->path_info, strlen(sc->path_info));
    um__cgi_env_del(&f->env, "PATH_TRANSLATED");
    if (sc->path_info[0]) {
        char *pt = um_malloc(rlen + strlen(sc->path_info) + 1);
        memcpy(pt, o->root, rlen);
        memcpy(pt + rlen, sc->path_info, strlen(sc->path_info) + 1);
        um__cgi_env_set(&f->env, "PATH_TRANSLATED", pt, strlen(pt));
        free(pt);
    }
    um__cgi_env_set(&f->env, "QUERY_STRING", query.base, query.len);
    free(sn);

    char **args = um_cgi_query_args(query, MAX_ARGS);
    size_t nargs = 0;
    if (args)
        while (args[nargs])
            nargs++;
    char **argv = um_calloc(nargs + 2, sizeof(*argv));
    argv[0] = abs;
    for (size_t i = 0; i < nargs; i++)
        argv[i + 1] = args[i];

    /* The previous script of a local redirect: its output is done with. */
    if (f->child) {
        um__cgi_child_detach(f->child, false);
        f->child = NULL;
    }
    um__cgi_close_io(f->wc, &f->outio);
    um__cgi_close_io(f->wc, &f->inio);
    um__cgi_close_io(f->wc, &f->errio);
    f->out_len = f->out_off = 0;
    f->in_len = f->in_off = 0;

    /* The directory of the script is its working directory (RFC 3875 section 7.2). */
    char *dir = um_strndup(abs, (size_t)(base - abs - 1));
    int e = um__cgi_spawn(f, abs, dir, argv);
    if (e != 0) {
        um_log_err("cgi: %s: cannot run %s: %s", f->tag, abs, strerror(e));
        status = e == EACCES ? 403 : 502; /* ENOENT: its interpreter is missing */
    }
    free(dir);
    free(argv);
    um_cgi_free_args(args);
    free(abs);
    free(sc);
    return status;
}
