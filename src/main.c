/* SPDX-License-Identifier: BSD-2-Clause */
/* umbra [-t] [-h] [-v] [-a HOST:PORT]... [config.lua] */
#include <stdio.h>
#include <string.h>

#include "umbra/config.h"
#include "umbra/disktier.h"
#include "umbra/hooks.h"
#include "umbra/log.h"
#include "umbra/module.h"
#include "umbra/server.h"
#include "umbra/tls.h"
#include "umbra/upstream.h"

/* The commit the binary was built from (build/gen/commit.c, cmake/commit.cmake). */
extern const char um_build_commit[];

static void print_version(void)
{
    printf("umbra %s (commit %s)\n"
           "OpenSSL: %s\n"
           "LuaJIT: %s\n"
           "libcurl: %s\n",
           UMBRA_VERSION, um_build_commit, um_tls_library_version(), um_hooks_library_version(),
           um_upstream_library_version());
}

static void usage(FILE *out)
{
    fprintf(out, "usage: umbra [-t] [-h] [-v] [-a HOST:PORT]... [config.lua]\n"
                 "  -t  check the configuration and exit\n"
                 "  -h  show this help\n"
                 "  -v  show the version, the commit and the libraries' versions\n"
                 "  -a  listen on HOST:PORT instead of the addresses the file gives\n"
                 "      (repeatable; for instance to run a Yunying-style file, whose port\n"
                 "      setting listens on every interface, on 127.0.0.1 only)\n"
                 "The configuration defaults to ./config.lua.\n");
}

int main(int argc, char **argv)
{
    const char *file = "config.lua";
    bool test_only = false;
    bool have_file = false;
    const char *addrs[16] = {NULL};
    size_t num_addrs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-a") == 0) {
            if (i + 1 >= argc || num_addrs == sizeof(addrs) / sizeof(addrs[0])) {
                fprintf(stderr, "umbra: -a needs HOST:PORT (at most 16 times)\n");
                return 2;
            }
            addrs[num_addrs++] = argv[++i];
        } else if (strcmp(a, "-t") == 0) {
            test_only = true;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) {
            print_version();
            return 0;
        } else if (a[0] == '-' || have_file) {
            fprintf(stderr, "umbra: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        } else {
            file = a;
            have_file = true;
        }
    }

    um_modules_init(); /* the modules' settings, slots and counters */
    um_config_listen_override(addrs, num_addrs);
    char err[1024];
    struct um_config *cfg = um_config_load(file, err, sizeof(err));
    if (cfg == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    /* What the loader cannot check (OpenSSL's view of the certificates and ciphers, the
     * disk stores), before anything is bound. */
    if (!um_modules_verify(cfg, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        um_config_unref(cfg);
        return 1;
    }
    if (test_only) {
        /* The check goes as far as the start does: the file also runs in each worker's
         * request state, where it sees the umbra table. */
        if (!um_modules_try(cfg, err, sizeof(err))) {
            fprintf(stderr, "%s\n", err);
            um_config_unref(cfg);
            return 1;
        }
        printf("%s: configuration ok\n", file);
        um_config_unref(cfg);
        return 0;
    }
    um_log_level = (enum um_log_level)cfg->log_level;
    um_upstream_global_init();
    struct um_server *s = um_server_create(cfg, err, sizeof(err));
    if (s == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int status = um_server_run(s);
    um_server_destroy(s);
    um_upstream_global_cleanup();
    return status;
}
