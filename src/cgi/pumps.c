/* SPDX-License-Identifier: BSD-2-Clause */
/* The CGI origin's pumps: the script's stdout to the sink, stderr to the log, the body to stdin. */
#include "internal.h"

/* ---------------------------------------------------------------- stdout, stderr, stdin */

void um__cgi_pause_output(struct cgi_fetch *f, bool paused)
{
    f->paused = paused;
    if (f->outio.fd >= 0)
        um_loop_io_set(f->wc->ctx->loop, &f->outio, f->outio.fd, paused ? 0 : EPOLLIN);
}

/* Offers the buffered body bytes to the sink. Returns false when the sink is behind (the
 * fetch is paused) or gone. */
bool um__cgi_deliver(struct cgi_fetch *f)
{
    while (f->sink && f->out_off < f->out_len) {
        size_t n = f->out_len - f->out_off;
        if (f->remaining >= 0 && (int64_t)n > f->remaining)
            n = (size_t)f->remaining; /* past what the head announced: dropped */
        if (n == 0) {
            f->out_off = f->out_len;
            break;
        }
        size_t took = f->sink->ops->on_data(f->sink, f->out + f->out_off, n);
        if (took == 0) {
            um__cgi_pause_output(f, true);
            return false;
        }
        f->out_off += took;
        f->unflushed = true;
        if (f->remaining >= 0)
            f->remaining -= (int64_t)took;
    }
    f->out_off = f->out_len = 0;
    if (f->sink && f->remaining == 0) {
        um__cgi_fetch_end(f); /* the whole announced body is out */
        return false;
    }
    return f->sink != NULL;
}

static bool skip_field(um_str name)
{
    return um_str_eq_ci(name, "server") || um_str_eq_ci(name, "content-length") ||
           um_str_eq_ci(name, "connection") || um_str_eq_ci(name, "keep-alive") ||
           um_str_eq_ci(name, "transfer-encoding") || um_str_eq_ci(name, "upgrade") ||
           um_str_eq_ci(name, "proxy-connection");
}

/* The script's fields in[0..n) that go on, into out; returns how many. */
static size_t kept_fields(const struct um_header *in, size_t n, struct um_header *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!skip_field(in[i].name))
            out[k++] = in[i];
    return k;
}


/* The head is complete: answer, redirect or fail. Returns false when the fetch is over. */
static bool send_head(struct cgi_fetch *f)
{
    struct um_header hs[UM_HTTP1_MAX_RESPONSE_FIELDS];
    struct um_response_head head = {.content_length = -1};
    size_t head_len;
    if (f->nph) {
        struct um_http1_response resp;
        struct um_http1_resp_parser p;
        enum um_http1_resp_err err;
        um_http1_resp_parser_init(&p);
        int r = um_http1_parse_response(&p, f->out, f->out_len, MAX_HEAD, &resp, &err);
        if (r == UM_AGAIN)
            return true;
        if (r != UM_OK || resp.status < 200 || (resp.flags & UM_RESP_F_TE)) {
            um_log_err("cgi: %s: nph script wrote no valid HTTP response head", f->tag);
            um__cgi_fetch_fail(f, 502);
            return false;
        }
        head.status = resp.status;
        head.reason = resp.reason;
        head.headers = hs;
        head.num_headers = kept_fields(resp.headers, resp.num_headers, hs);
        if (resp.flags & UM_RESP_F_CONTENT_LENGTH)
            head.content_length = (int64_t)resp.content_length;
        head_len = resp.head_len;
    } else {
        struct um_cgi_head h;
        int r = um_cgi_parse_head(f->out, f->out_len, &h);
        if (r == UM_AGAIN)
            return true;
        if (r != UM_OK) {
            um_log_err("cgi: %s: script wrote no valid CGI response head", f->tag);
            um__cgi_fetch_fail(f, 502);
            return false;
        }
        if (h.location.len && h.location.base[0] == '/' && !h.has_status) {
            /* A local redirect (RFC 3875 section 6.2.2): the answer is that of a GET of
             * the new path, from this route's scripts; any other local path goes to the
             * client as a 302. */
            struct cgi_origin *o = f->o;
            size_t plen = strlen(o->route_path);
            um_str loc = h.location;
            const char *q = memchr(loc.base, '?', loc.len);
            um_str p = {loc.base, q ? (size_t)(q - loc.base) : loc.len};
            um_str query = q ? (um_str){q + 1, loc.len - p.len - 1} : (um_str){"", 0};
            if (p.len >= plen && memcmp(p.base, o->route_path, plen) == 0) {
                if (++f->redirects > MAX_REDIRECTS) {
                    um_log_err("cgi: %s: more than %d local redirects", f->tag, MAX_REDIRECTS);
                    um__cgi_fetch_fail(f, 502);
                    return false;
                }
                char copy[MAX_PATH + MAX_PATH];
                if (loc.len >= sizeof(copy)) {
                    um__cgi_fetch_fail(f, 502);
                    return false;
                }
                memcpy(copy, loc.base, loc.len);
                p.base = copy + (p.base - loc.base) + plen;
                p.len -= plen;
                query.base = copy + (query.base - loc.base);
                um__cgi_env_set(&f->env, "REQUEST_METHOD", "GET", 3);
                um__cgi_env_set(&f->env, "REQUEST_URI", copy, loc.len);
                um__cgi_env_del(&f->env, "CONTENT_LENGTH");
                um__cgi_env_del(&f->env, "CONTENT_TYPE");
                int st = um__cgi_start_script(f, p, query);
                if (st != 0) {
                    um__cgi_fetch_fail(f, st);
                    return false;
                }
                /* The new script runs as a GET: no body, whatever the first one got. */
                f->has_body = false;
                um__cgi_close_io(f->wc, &f->inio);
                return false; /* the first script's output is over */
            }
            h.status = 302;
        }
        head.status = h.status;
        head.reason = h.reason;
        head.headers = hs;
        head.num_headers = kept_fields(h.headers, h.num_headers, hs);
        head.content_length = h.content_length;
        head_len = h.head_len;
    }
    f->head_done = true;
    f->remaining = head.content_length;
    f->sink->ops->on_head(f->sink, &head);
    f->out_off = head_len;
    return um__cgi_deliver(f);
}

void um__cgi_on_stdout(struct um_io *io, uint32_t events)
{
    struct cgi_fetch *f = um_container_of(io, struct cgi_fetch, outio);
    for (int k = 0; k < READS_PER_EVENT && io->fd >= 0 && f->sink && !f->paused; k++) {
        if (!f->head_done && f->out_len == f->out_cap) {
            if (f->out_cap >= MAX_HEAD) {
                um_log_err("cgi: %s: response head over %d bytes", f->tag, MAX_HEAD);
                um__cgi_fetch_fail(f, 502);
                return;
            }
            f->out_cap *= 2;
            f->out = um_realloc(f->out, f->out_cap);
        }
        ssize_t n = read(io->fd, f->out + f->out_len, f->out_cap - f->out_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            /* The script's output ran dry: what a compressing layer holds goes out (a
             * script may stream events). */
            if (f->unflushed) {
                f->unflushed = false;
                um_sink_flush(f->sink);
            }
            return;
        }
        if (n <= 0) {
            /* The script closed its stdout (or it broke): the answer is over. */
            if (!f->head_done) {
                if (f->out_len == 0)
                    um_log_err("cgi: %s: script ended without output", f->tag);
                else
                    um_log_err("cgi: %s: script ended inside its response head", f->tag);
                um__cgi_fetch_fail(f, 502);
            } else {
                um__cgi_fetch_end(f);
            }
            return;
        }
        f->out_len += (size_t)n;
        if (!f->head_done) {
            if (!send_head(f))
                return;
        } else if (!um__cgi_deliver(f)) {
            return;
        }
    }
}

static void log_stderr_line(struct cgi_fetch *f)
{
    if (f->err_len)
        um_log_err("cgi: %s: %.*s", f->tag, (int)f->err_len, f->errline);
    f->err_len = 0;
}

void um__cgi_on_stderr(struct um_io *io, uint32_t events)
{
    struct cgi_fetch *f = um_container_of(io, struct cgi_fetch, errio);
    char buf[4096];
    for (int k = 0; k < READS_PER_EVENT && io->fd >= 0; k++) {
        ssize_t n = read(io->fd, buf, sizeof(buf));
        if (n < 0 && (errno == EINTR))
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            log_stderr_line(f);
            um__cgi_close_io(f->wc, io);
            return;
        }
        for (ssize_t i = 0; i < n; i++) {
            char c = buf[i];
            if (c == '\n') {
                log_stderr_line(f);
                continue;
            }
            if (f->err_len == sizeof(f->errline))
                log_stderr_line(f);
            f->errline[f->err_len++] = (unsigned char)c < ' ' && c != '\t' ? '?' : c;
        }
    }
}

/* Moves request body from the connection into the script's stdin until one of them has
 * to wait. */
void um__cgi_pump_body(struct cgi_fetch *f)
{
    while (f->sink && f->inio.fd >= 0) {
        if (f->in_off == f->in_len) {
            ssize_t n = f->sink->ops->read_body(f->sink, f->in, READ_CHUNK);
            if (n == UM_AGAIN)
                return; /* body_ready comes */
            if (n == 0) {
                um__cgi_close_io(f->wc, &f->inio); /* the script sees the end of its input */
                return;
            }
            if (n < 0) {
                /* The client's body failed: the connection answers, and says why. */
                struct um_sink *s = f->sink;
                um__cgi_fetch_done(f, true);
                s->ops->on_end(s, UM_ERR);
                return;
            }
            f->in_len = (size_t)n;
            f->in_off = 0;
        }
        ssize_t w = write(f->inio.fd, f->in + f->in_off, f->in_len - f->in_off);
        if (w > 0) {
            f->in_off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            um_loop_io_set(f->wc->ctx->loop, &f->inio, f->inio.fd, EPOLLOUT);
            return;
        }
        /* The script stopped reading (EPIPE): what is left of the body is not its. */
        um__cgi_close_io(f->wc, &f->inio);
        return;
    }
}

void um__cgi_on_stdin(struct um_io *io, uint32_t events)
{
    struct cgi_fetch *f = um_container_of(io, struct cgi_fetch, inio);
    if (io->fd < 0)
        return;
    um_loop_io_set(f->wc->ctx->loop, io, io->fd, 0);
    um__cgi_pump_body(f);
}

